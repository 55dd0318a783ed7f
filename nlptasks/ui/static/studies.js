// Studies (#studies, #studies/K/TASK/tune-NAME): `nlptasks tune` studies under the runs folders,
// each with its trials (state, parameters, objective value, seconds), the best one and best.toml.
"use strict";

(() => {
  const { $, el, api, say, num } = UI;

  async function show(arg) {
    const view = $("view-studies");
    view.replaceChildren(el("h2", { text: "Studies (nlptasks tune)" }));
    let list;
    try {
      list = await api("/api/studies");
    } catch (e) {
      view.append(el("p", { class: "error", text: e.message }));
      return;
    }
    say("");
    if (!list.studies.length) {
      view.append(el("p", { class: "note", text: "No studies under the runs folders (nlptasks tune RECIPE makes <runs>/<task>/tune-<study>/)." }));
      return;
    }
    view.append(UI.table([
      { label: "study", value: (s) => el("a", { href: "#studies/" + s.id, text: s.name }) },
      { label: "task", value: (s) => s.task },
      { label: "folder", value: (s) => s.path },
      { label: "best.toml", value: (s) => (s.has_best ? "yes" : "-") },
    ], list.studies));
    const id = decodeURIComponent(arg || "");
    if (!id) return;
    let s;
    try {
      s = await api("/api/study?id=" + encodeURIComponent(id));
    } catch (e) {
      view.append(el("p", { class: "error", text: e.message }));
      return;
    }
    view.append(el("h2", { text: "Study " + id }));
    if (s.problem) view.append(el("p", { class: "note", text: s.problem }));
    if (s.trials.length) {
      view.append(el("p", { class: "note", text: `objective: validation ${s.metric} (${s.direction}); best trial: ${s.best ?? "none yet"}` }));
      const names = [...new Set(s.trials.flatMap((t) => Object.keys(t.params)))];
      const table = UI.table([
        { label: "trial", value: (t) => String(t.number) },
        { label: "state", value: (t) => UI.badge(t.state === "complete" ? "complete" : t.state === "running" ? "running" : "failed", t.state) },
        { label: s.metric, num: true, value: (t) => num(t.value) },
        ...names.map((n) => ({ label: n, num: true, value: (t) => num(t.params[n]) })),
        { label: "seconds", num: true, value: (t) => num(t.seconds, 0) },
        { label: "note", value: (t) => t.note || "" },
      ], s.trials);
      table.querySelectorAll("tbody tr").forEach((tr, i) => { if (s.trials[i].number === s.best) tr.classList.add("best"); });
      view.append(table);
      const points = s.trials.filter((t) => t.value !== null).map((t) => [t.number, t.value]);
      view.append(UI.chart([{ name: s.metric, points }], { title: "objective by trial", xLabel: "trial" }));
    } else if (s.results) {
      view.append(el("div", { class: "card" }, UI.markdown(s.results)));
    }
    if (s.best_toml) view.append(el("h2", { text: "best.toml (nlptasks run best.toml trains it again)" }), el("pre", { text: s.best_toml }));
    view.append(el("p", { class: "note" }, "More plots of the same study: ",
      el("code", { text: `optuna-dashboard sqlite:///${s.path}/study.db` }), " (docs/ui.md)."));
  }

  UI.views.studies = { section: "view-studies", show };
})();
