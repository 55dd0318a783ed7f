"""The page at ``/`` in a real headless browser (Debian's chromium and chromedriver, through
selenium), against the real server serving tiny cls, ner, pair and sft runs: what the page shows
is what each run's predictor answers.  A screenshot of the page must not be blank.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import QUESTION, build_app, running, serve_state

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

pytestmark = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver): "
    "apt-get install chromium chromium-driver (.ci/run installs them)",
)
pytest.importorskip("selenium")

WAIT = 90  # seconds: generation on a busy 2-core machine


@pytest.fixture(scope="module")
def served(served_run):
    state = serve_state({f"tiny-{task}": served_run(task) for task in ("cls", "ner", "pair", "sft")})
    with running(build_app(state)) as url:
        yield url, state


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
        "--window-size=1200,900",
        "--lang=en-US",
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


def pick(driver, name: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    WebDriverWait(driver, WAIT).until(lambda d: d.find_elements(By.CSS_SELECTOR, f"#model option[value='{name}']"))
    Select(driver.find_element(By.ID, "model")).select_by_value(name)


def text_of(driver, element) -> str:
    return driver.execute_script("return arguments[0].textContent", element)


def predict_on_page(driver, texts: list[str]):
    from selenium.webdriver.common.by import By

    for i, text in enumerate(texts):
        field = wait(driver, f"#input-{i}")
        field.clear()
        field.send_keys(text)
    driver.execute_script("document.getElementById('result').replaceChildren()")
    driver.find_element(By.ID, "run").click()
    return wait(driver, "#result details")


def test_the_page_shows_what_each_predictor_answers(served, browser, tmp_path):
    from selenium.webdriver.common.by import By

    url, state = served
    browser.get(url + "/")
    assert browser.title == "nlptasks serve"

    # cls: the label and its score bar
    pick(browser, "tiny-cls")
    text = "这家酒店服务很好，房间也干净"
    expected = state.models["tiny-cls"].predictor([text])[0]
    predict_on_page(browser, [text])
    assert text_of(browser, wait(browser, "#label-name")) == expected["label"]
    assert browser.find_elements(By.CSS_SELECTOR, "#result .bar-fill")

    # pair: two fields (from the run's manifest), the label or score of the pair
    pick(browser, "tiny-pair")
    wait(browser, "#input-1")
    assert not browser.find_elements(By.ID, "input-2")
    a, b = "酒店早餐几点开始", "早饭几点开始供应"
    expected = state.models["tiny-pair"].predictor([a, b])[0]
    predict_on_page(browser, [a, b])
    if "label" in expected:
        assert text_of(browser, wait(browser, "#label-name")) == str(expected["label"])
    else:
        assert text_of(browser, wait(browser, "#score-value")) == f"{expected['score']:.4f}"

    # ner: entities highlighted in the text, each a span with the entity's text
    ner = state.models["tiny-ner"]
    candidates = [
        ner.manifest.get("example") or "",
        "小明在北京大学读书",
        "邹琳雪代表河南博物馆参加了比赛。",
        "张伟昨天去了上海浦东机场。",
    ]
    outputs = ner.predictor(candidates)
    found = [(t, out) for t, out in zip(candidates, outputs, strict=True) if t and out["entities"]]
    if not found:
        pytest.skip("the tiny ner run finds no entity in any candidate text")
    text, expected = found[0]
    pick(browser, "tiny-ner")
    predict_on_page(browser, [text])
    spans = browser.find_elements(By.CSS_SELECTOR, "#result .highlighted span.entity")
    assert [text_of(browser, s) for s in spans] == [e["text"] for e in expected["entities"]]
    assert [s.get_attribute("data-type") for s in spans] == [e["type"] for e in expected["entities"]]
    plain = browser.execute_script(
        "const p = document.querySelector('#result .highlighted').cloneNode(true);"
        "p.querySelectorAll('sup').forEach((s) => s.remove()); return p.textContent"
    )
    assert plain == expected["text"]  # the whole text, the entities in place

    # sft: a chat box that streams the reply
    pick(browser, "tiny-sft")
    assert not browser.find_element(By.ID, "predict-form").is_displayed()
    box = wait(browser, "#chat-input")
    box.send_keys(QUESTION)
    browser.find_element(By.ID, "chat-send").click()
    reply = wait(browser, ".msg.assistant[data-done]")
    expected = state.models["tiny-sft"].predictor([QUESTION])[0]["response"]
    assert reply.get_attribute("data-done") in ("stop", "length")
    assert text_of(browser, reply.find_element(By.CSS_SELECTOR, ".text")) == expected

    shot = tmp_path / "page.png"
    assert browser.save_screenshot(str(shot))
    assert_not_blank(shot)


def assert_not_blank(path: Path) -> None:
    """More than one colour, over a fair share of the pixels: the page was drawn."""
    from PIL import Image

    image = Image.open(path).convert("RGB")
    pixels = image.width * image.height
    colours = image.getcolors(maxcolors=pixels)
    assert colours is not None and len(colours) > 20, "the screenshot has almost no colours"
    largest = max(count for count, _ in colours)
    assert largest < 0.9 * pixels, f"one colour covers {largest / pixels:.0%} of the screenshot"


def test_the_page_asks_for_the_api_key_and_then_works(served, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    _, state = served
    keyed = serve_state({"tiny-cls": state.models["tiny-cls"].run_dir}, api_key="s3cret")
    with running(build_app(keyed)) as url:
        browser.get(url + "/")
        browser.execute_script("sessionStorage.clear()")
        browser.get(url + "/")
        status = wait(browser, "#status.error")
        assert "API key" in status.text
        key = browser.find_element(By.ID, "api-key")
        key.send_keys("s3cret", Keys.TAB)  # a change event: the page loads the models with the key
        pick(browser, "tiny-cls")
        expected = keyed.models["tiny-cls"].predictor(["服务很好"])[0]
        predict_on_page(browser, ["服务很好"])
        assert text_of(browser, wait(browser, "#label-name")) == expected["label"]


def test_the_page_shows_a_multi_label_answer(browser, tmp_path):
    from selenium.webdriver.common.by import By

    from conftest import multilabel_recipe, tiny_run

    run_dir = tiny_run(tmp_path, multilabel_recipe(tmp_path), "ml", "train.epochs=1", tiny=())
    state = serve_state({"ml": run_dir})
    with running(build_app(state)) as url:
        browser.get(url + "/")
        pick(browser, "ml")
        text = "Thank you so much, this made my day!"
        expected = state.models["ml"].predictor([text])[0]
        predict_on_page(browser, [text])
        line = text_of(browser, wait(browser, "#labels-line"))
        chips = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#labels-line .label-chip")]
        assert chips == expected["labels"]
        assert expected["labels"] or "none above its threshold" in line
        assert len(browser.find_elements(By.CSS_SELECTOR, "#result .bar-fill")) == len(expected["scores"])
