// The runs list (#runs): every run under the runs folders, filtered by task and text, several
// selected to compare (#compare/ID,ID): `nlptasks compare`'s table and one chart of their curves.
"use strict";

(() => {
  const { $, el, api, say, num, seconds, badge } = UI;
  let rows = [];
  const selected = new Set();

  function base(path) {
    return path ? String(path).split("/").pop() : "-";
  }

  function metricText(m) {
    return m ? `${m.name} ${num(m.value)} (${m.split})` : "-";
  }

  function matches(row) {
    const task = $("filter-task").value;
    const text = $("filter-text").value.trim().toLowerCase();
    if (task && row.task !== task) return false;
    if (!text) return true;
    return [row.id, row.name, row.recipe, row.status, row.note, row.task].some((v) => v && String(v).toLowerCase().includes(text));
  }

  function draw() {
    const body = $("runs-table").querySelector("tbody");
    const shown = rows.filter(matches);
    body.replaceChildren(...shown.map((r) => el("tr", { "data-id": r.id, "data-status": r.status },
      el("td", {}, el("input", {
        type: "checkbox", "aria-label": "select " + r.id, checked: selected.has(r.id),
        onchange: (e) => { e.target.checked ? selected.add(r.id) : selected.delete(r.id); update(); },
      })),
      el("td", { text: r.task }),
      el("td", {}, el("a", { href: "#run/" + r.id, class: "run-link", text: r.name })),
      el("td", { title: r.recipe || "", text: base(r.recipe) }),
      el("td", { text: r.date ? String(r.date).replace("T", " ") : "-" }),
      el("td", {}, badge(r.status, r.note)),
      el("td", { class: "metric", text: metricText(r.metric) }),
      el("td", { class: "num", text: seconds(r.seconds) }),
      el("td", { class: "num", text: num(r.tokens_per_second, 0) }),
    )));
    const empty = $("runs-empty");
    empty.hidden = shown.length > 0;
    empty.textContent = rows.length ? "No run matches the filter." : "No runs yet under the runs folders: start one from New run.";
    update();
  }

  function update() {
    for (const id of [...selected]) if (!rows.some((r) => r.id === id)) selected.delete(id);
    $("compare").disabled = selected.size < 2;
    $("compare").textContent = selected.size ? `Compare selected (${selected.size})` : "Compare selected";
  }

  async function load(quiet) {
    let body;
    try {
      body = await api("/api/runs");
    } catch (e) {
      say(e.message, true);
      return;
    }
    rows = body.runs;
    const select = $("filter-task");
    const chosen = select.value;
    const tasks = [...new Set(rows.map((r) => r.task))].sort();
    select.replaceChildren(el("option", { value: "", text: "every task" }), ...tasks.map((t) => el("option", { value: t, text: t })));
    select.value = tasks.includes(chosen) ? chosen : "";
    if (!quiet) say(`${rows.length} runs under ${body.roots.join(", ")}`);
    draw();
  }

  $("filter-task").addEventListener("change", draw);
  $("filter-text").addEventListener("input", draw);
  $("compare").addEventListener("click", () => {
    location.hash = "#compare/" + [...selected].map(encodeURIComponent).join(",");
  });

  UI.views.runs = {
    section: "view-runs",
    async show() {
      await load(false);
      UI.timers.push(setInterval(() => load(true), 3000));
    },
  };

  UI.views.compare = {
    section: "view-compare",
    async show(arg) {
      const ids = arg.split(",").map(decodeURIComponent).filter(Boolean);
      const view = $("view-compare");
      view.replaceChildren(el("h2", { text: "Compare " + ids.join(", ") }));
      let body;
      try {
        body = await api("/api/compare?" + ids.map((i) => "id=" + encodeURIComponent(i)).join("&"));
      } catch (e) {
        view.append(el("p", { class: "error", id: "compare-error", text: e.message }));
        say(e.message, true);
        return;
      }
      say("");
      const bySeries = {};
      for (const [id, points] of Object.entries(body.curves)) {
        for (const [name, pts] of Object.entries(UI.seriesOf(points))) (bySeries[name] = bySeries[name] || {})[id] = pts;
      }
      const names = Object.keys(bySeries).sort((a, b) => (a === "loss" ? -1 : b === "loss" ? 1 : a.localeCompare(b)));
      const pick = el("select", { id: "compare-series" }, names.map((n) => el("option", { value: n, text: n })));
      const holder = el("div", { id: "compare-chart" });
      const drawChart = () => {
        const series = Object.entries(bySeries[pick.value] || {}).map(([id, pts]) => ({ name: id, points: pts }));
        holder.replaceChildren(UI.chart(series, { title: pick.value + " by step, one line per run" }));
      };
      pick.addEventListener("change", drawChart);
      view.append(
        el("div", { class: "row" }, el("label", { class: "small" }, "Curve", pick)),
        holder,
        el("h2", { text: "nlptasks compare" }),
        el("div", { class: "card", id: "compare-table" }, UI.markdown(body.table)),
        el("pre", { class: "command", text: "nlptasks compare " + ids.map((i) => rows.find((r) => r.id === i)?.path || i).join(" ") }),
      );
      drawChart();
    },
  };
})();
