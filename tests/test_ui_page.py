"""The page of ``nlptasks ui`` in a real headless browser (Debian's chromium and chromedriver,
through selenium, as tests/test_serve_page.py drives the serve page), against the real dashboard on
uvicorn over a folder with two tiny complete runs: list them, open one, compare the two; then on
New run a validation error shown at its field, a tiny run started from the form whose curve grows
while it trains (a real ``python -m nlptasks run``), stopped and resumed to the end.  The last view
is saved as docs/ui.png (docs/ui.md shows it).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest import IDLE_S, RECIPES, ROOT, running, tiny_run

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

pytestmark = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver): "
    "apt-get install chromium chromium-driver (.ci/run installs them)",
)
pytest.importorskip("selenium")
pytest.importorskip("fastapi")

WAIT = 120  # seconds: a run's start (imports) and training on a busy 2-core machine
SCREENSHOT = ROOT / "docs" / "ui.png"
FORM = {  # the tiny run typed into the form: 10 (busy) to 40 (quiet) optimizer steps a second here, a checkpoint every 5
    "model.scratch.layers": "1",
    "model.scratch.hidden": "32",
    "model.scratch.heads": "2",
    "model.scratch.intermediate": "64",
    "model.max_length": "64",
    "data.max_train_rows": "640",
    "data.max_eval_rows": "8",
    "train.batch_size": "8",
    "train.max_steps": "400",
    "train.logging_steps": "1",
    "train.eval_strategy": "steps",
    "train.eval_steps": "200",
    "output.checkpoint_steps": "5",
}


@pytest.fixture(scope="module")
def dashboard(runs):
    from nlptasks.ui.app import create_app
    from nlptasks.ui.state import UiState

    root = runs / "page"
    small = ("data.max_train_rows=64", "data.max_eval_rows=8", "train.logging_steps=1")
    tiny_run(root, "cls.toml", "first", *small)
    tiny_run(root, "cls.toml", "second", *small, "train.learning_rate=2e-3")
    state = UiState.of([root], [RECIPES])
    with running(create_app(state)) as url:
        yield url, root


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # selenium-manager never downloads a browser or a driver
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def wait(driver, css: str, timeout: float = WAIT):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(ec.visibility_of_element_located((By.CSS_SELECTOR, css)))


def until(driver, predicate, timeout: float = WAIT, poll: float = 0.2):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=poll).until(lambda d: predicate(d))


def set_field(driver, key: str, value: str) -> None:
    """Type ``value`` into the form's field for ``key`` (opening its section as a click would)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    box = driver.find_element(By.CSS_SELECTOR, f'#recipe-form .field[data-key="{key}"]')
    for summary in driver.execute_script(
        "const out = []; let d = arguments[0].closest('details');"
        "while (d) { if (!d.open) out.unshift(d.querySelector('summary')); d = d.parentElement.closest('details'); }"
        "return out",
        box,
    ):
        summary.click()
    field = box.find_element(By.CSS_SELECTOR, "input, select")
    if field.tag_name == "select":
        Select(field).select_by_value(value)
    else:
        field.clear()
        field.send_keys(value)


def points(driver) -> int:
    """The points on the run page's loss chart (0 while there is none)."""
    return int(
        driver.execute_script(
            "const c = document.querySelector('#run-curves .chart'); return c ? Number(c.dataset.points) : 0"
        )
    )


def status(driver) -> str:
    return driver.execute_script(
        "const b = document.querySelector('#run-status .badge'); return b ? b.dataset.status : ''"
    )


def test_list_open_compare_then_start_watch_stop_and_resume_a_run(dashboard, browser):
    from selenium.webdriver.common.by import By

    url, root = dashboard
    browser.get(url + "/")
    assert browser.title == "nlptasks ui"
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr")) == 2)
    rows = browser.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr")
    assert {r.get_attribute("data-id") for r in rows} == {"0/cls/first", "0/cls/second"}
    assert all(r.get_attribute("data-status") == "complete" for r in rows)
    assert all(r.find_element(By.CSS_SELECTOR, ".metric").text.startswith("accuracy ") for r in rows)

    # the text filter
    browser.find_element(By.ID, "filter-text").send_keys("second")
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr")) == 1)
    browser.find_element(By.ID, "filter-text").clear()
    browser.find_element(By.ID, "filter-text").send_keys(" ")
    until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr")) == 2)

    # compare the two: nlptasks compare's table and one chart with a line per run
    for box in browser.find_elements(By.CSS_SELECTOR, "#runs-table tbody input[type=checkbox]"):
        box.click()
    browser.find_element(By.ID, "compare").click()
    table = wait(browser, "#compare-table table")
    assert "validation accuracy" in table.text and "first" in table.text and "second" in table.text
    chart = wait(browser, "#compare-chart .chart")
    assert chart.get_attribute("data-series") == "2" and int(chart.get_attribute("data-points")) > 2

    # open a run: its metrics, card (rendered, its picture loaded through the API) and commands
    browser.get(url + "/#run/0/cls/first")
    wait(browser, "#run-metrics table")
    assert "accuracy" in browser.find_element(By.ID, "run-metrics").text
    until(
        browser,
        lambda d: d.execute_script("const i = document.querySelector('#run-card img'); return i && i.naturalWidth > 0"),
    )
    assert "nlptasks serve" in browser.find_element(By.CSS_SELECTOR, "#run-commands pre[data-what=serve]").text
    assert points(browser) > 0

    # New run: a validation error shown at its field
    browser.get(url + "/#new/r0%2Fcls.toml")
    wait(browser, '#recipe-form .field[data-key="train.learning_rate"]')
    set_field(browser, "train.learning_rate", "2")
    browser.find_element(By.ID, "validate").click()
    problem = wait(browser, '#recipe-form .field[data-key="train.learning_rate"] .problem')
    assert "less than 1" in problem.text
    assert "--set train.learning_rate=2" in wait(browser, "#command").text

    # start a tiny run from the form, see its curve grow while it trains, stop it, resume it
    set_field(browser, "train.learning_rate", "0.0005")
    for key, value in FORM.items():
        set_field(browser, key, value)
    browser.find_element(By.ID, "start").click()
    until(browser, lambda d: d.execute_script("return location.hash").startswith("#run/0/cls/"))
    first = until(browser, points, timeout=IDLE_S)
    assert wait(browser, "#run-progress").is_displayed()
    until(browser, lambda d: points(d) > first)  # new points without a reload
    browser.find_element(By.ID, "stop-run").click()
    until(browser, lambda d: status(d) in ("resumable", "complete"))
    if status(browser) == "complete":
        pytest.fail("the run finished before Stop reached it: give FORM more steps")
    stopped_at = points(browser)
    wait(browser, "#resume-run").click()
    until(browser, lambda d: status(d) == "complete", timeout=IDLE_S)
    wait(browser, "#run-metrics table")
    assert points(browser) >= stopped_at
    run_dir = root / "cls" / browser.execute_script("return location.hash").rsplit("/", 1)[1]
    assert (run_dir / "COMPLETE").exists()
    time.sleep(0.5)  # the card's picture
    browser.execute_script("window.scrollTo(0, 0)")
    browser.save_screenshot(str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size > 20_000  # a page, not a blank one
