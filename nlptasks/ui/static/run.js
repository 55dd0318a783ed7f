// One run (#run/K/TASK/NAME): status and progress, curves (polled every two seconds while it trains:
// new points appear without a reload), metrics by split, per-class tables, evals, exports,
// adapters, the commands to reproduce / infer / export / serve it, its card, and Try.
"use strict";

(() => {
  const { $, el, api, say, num, seconds, badge } = UI;
  const LIVE = ["running", "queued"];
  const POLL_MS = 2000; // a live run's curve and progress: new points within two seconds

  function metricsTable(metrics) {
    const splits = Object.keys(metrics).filter((s) => s !== "train");
    const names = [];
    for (const s of splits) for (const k of Object.keys(metrics[s])) if (!names.includes(k) && !/runtime|per_second|^epoch$/.test(k)) names.push(k);
    if (!names.length) return el("p", { class: "note", text: "No metrics (the run has not finished)." });
    return UI.table(
      [{ label: "metric", value: (n) => n }, ...splits.map((s) => ({ label: s, num: true, value: (n) => num(metrics[s][n]) }))],
      names,
    );
  }

  function perClass(tables) {
    return Object.entries(tables).map(([split, t]) => el("div", {},
      el("h3", { text: "per class (" + split + ")" }),
      UI.table([{ label: "class", value: (r) => r[0] }, ...t.columns.map((c) => ({ label: c, num: true, value: (r) => num(r[1][c]) }))],
        Object.entries(t.rows)),
    ));
  }

  function commands(cmds) {
    return el("div", { id: "run-commands" }, Object.entries(cmds).map(([what, line]) => el("div", {},
      el("div", { class: "note", text: what }), el("pre", { class: "command", "data-what": what, text: line }))));
  }

  function tryPanel(run) {
    const box = el("div", { class: "panel try", id: "try" }, el("h2", { text: "Try it" }));
    const fields = el("div");
    const out = el("pre", { id: "try-output", hidden: true });
    const info = el("p", { class: "note", id: "try-info" });
    const go = el("button", { type: "button", id: "try-run", text: "Predict" });
    box.append(fields, el("div", { class: "row" }, go), info, out);
    api("/api/try?id=" + encodeURIComponent(run.id)).then((d) => {
      fields.replaceChildren(...d.inputs.map((f, i) => el("label", { class: "small" }, f.name,
        el("textarea", { id: "try-input-" + i, rows: 2, text: f.example || "" }))));
      info.textContent = d.loaded ? "Loaded." : "Loads on the first prediction (a few seconds), unloaded when idle.";
    }).catch((e) => { info.textContent = e.message; info.className = "error"; });
    go.addEventListener("click", async () => {
      const texts = [...fields.querySelectorAll("textarea")].map((t) => t.value);
      go.disabled = true;
      info.textContent = "Predicting (loading the run first if it is not loaded)…";
      try {
        const d = await api("/api/try", { method: "POST", body: { id: run.id, inputs: [texts.length === 1 ? texts[0] : texts] } });
        out.hidden = false;
        out.textContent = JSON.stringify(d.outputs[0], null, 2);
        info.textContent = `Loaded runs: ${d.loaded.map((m) => m.id).join(", ")} (at most ${d.max_loaded}; each unloaded after ${d.idle_s} s idle).`;
        info.className = "note";
      } catch (e) {
        info.textContent = e.message;
        info.className = "error";
      } finally {
        go.disabled = false;
      }
    });
    return box;
  }

  function progressBar(progress) {
    if (!progress || !progress.max_steps) return el("div", { id: "run-progress", hidden: true });
    const pct = Math.min(100, (100 * (progress.step || 0)) / progress.max_steps);
    return el("div", { id: "run-progress", "data-step": String(progress.step || 0) },
      el("div", { class: "progress" }, el("span", { style: `width:${pct.toFixed(1)}%` })),
      el("span", { class: "note", text: `step ${progress.step || 0} of ${progress.max_steps}` }));
  }

  function actions(run, status, job) {
    const box = el("div", { class: "row", id: "run-actions" });
    if (job && LIVE.includes(job.state) && LIVE.includes(status)) {
      box.append(el("button", { type: "button", class: "danger", id: "stop-run", text: "Stop",
        onclick: async (e) => {
          e.target.disabled = true;
          try {
            await api(`/api/jobs/${encodeURIComponent(job.id)}/stop`, { method: "POST" });
            say("Stopping " + run.id + " (SIGINT; it keeps its checkpoints)…");
          } catch (err) {
            say(err.message, true);
          }
        } }));
    }
    if (["resumable", "stopped", "failed", "incomplete"].includes(status)) {
      box.append(el("button", { type: "button", id: "resume-run", text: "Resume",
        onclick: async (e) => {
          e.target.disabled = true;
          try {
            await api("/api/resume", { method: "POST", body: { id: run.id } });
            say("Resuming " + run.id + "…");
          } catch (err) {
            say(err.message, true);
            e.target.disabled = false;
          }
        } }));
    }
    return box;
  }

  async function show(id) {
    const view = $("view-run");
    let run;
    try {
      run = await api("/api/run?id=" + encodeURIComponent(id));
    } catch (e) {
      view.replaceChildren(el("h2", { text: id }), el("p", { class: "error", id: "run-error", text: e.message }),
        el("p", {}, el("a", { href: "#runs", text: "Back to the runs" })));
      say(e.message, true);
      return;
    }
    say("");
    const head = el("h2", {}, `${run.task} / ${run.name} `, el("span", { id: "run-status" }, badge(run.status, run.note)));
    const curves = el("div", { id: "run-curves" });
    let progress = el("div", { id: "run-progress", hidden: true });
    let acts = actions(run, run.status, run.job ? { id: run.job, state: run.status } : null);
    view.replaceChildren(...[
      head,
      el("p", { class: "note" }, `${run.path} · recipe ${run.recipe || "-"} · ${run.date || ""} · wall time ${seconds(run.seconds)} · `
        + `${num(run.tokens_per_second, 0)} tokens/s`),
      progress, acts,
      run.problems.length ? el("div", { class: "problems", id: "run-problems" }, run.problems.map((p) => el("p", { text: p }))) : null,
      curves,
      el("h2", { text: "Metrics" }), el("div", { id: "run-metrics" }, metricsTable(run.metrics)),
      perClass(run.per_class),
      run.evals.length ? [el("h2", { text: "Evaluations (nlptasks eval)" }),
        UI.table([{ label: "folder", value: (e) => e.folder }, { label: "data", value: (e) => e.source || e.error || "-" },
          { label: "metrics", value: (e) => Object.entries(e.metrics || {}).map(([k, v]) => `${k} ${num(v)}`).join(", ") }], run.evals)] : null,
      run.exports.length ? [el("h2", { text: "Exports and precisions measured" }),
        UI.table([{ label: "folder", value: (x) => x.folder }, { label: "configuration", value: (x) => x.label || x.backend },
          { label: "agrees", value: (x) => (x.agrees ? "yes" : "no") + (x.why ? ": " + x.why : "") },
          { label: "rows/s batched", num: true, value: (x) => num(x.speed && x.speed.batched, 0) }], run.exports)] : null,
      run.adapters.length ? [el("h2", { text: "Adapters" }), el("p", { text: run.adapters.join(", ") })] : null,
      el("h2", { text: "Commands" }), commands(run.commands),
      run.status === "complete" ? tryPanel(run) : null,
      run.card ? el("details", { class: "section", open: true }, el("summary", { text: "Card (README.md)" }),
        el("div", { class: "card", id: "run-card" }, UI.markdown(run.card, run.id))) : null,
    ].flat().filter((x) => x !== null && x !== false));
    let shown = -1;
    let shownHeading = null;
    let shownStep = null;
    let points = [];  // the curve so far
    let source = null;  // where its points come from (live, checkpoint, log_history)
    let lastStatus = run.status;
    async function poll() {
      let c;
      try {
        // after the first answer only the points from the last step shown on (that step again: an
        // evaluation may add its values to it); the whole curve again when its source changes
        const from = points.length && source ? "&from_step=" + points[points.length - 1].step : "";
        c = await api("/api/run/curve?id=" + encodeURIComponent(id) + from);
      } catch (e) {
        say(e.message, true);
        if (e.status === 404) {
          UI.stopTimers();
          view.prepend(el("p", { class: "error", id: "run-error", text: "This run is gone: " + e.message }));
        }
        return;
      }
      // the page is rebuilt only where something changed: an open page costs the run it watches
      // next to nothing (docs/ui.md: the live curve's cost, measured)
      const heading = JSON.stringify([c.status, c.note, c.job]);
      if (heading !== shownHeading) {
        shownHeading = heading;
        $("run-status").replaceChildren(badge(c.status, c.note));
        const again = actions(run, c.status, c.job);
        acts.replaceWith(again);
        acts = again;
      }
      const step = JSON.stringify(LIVE.includes(c.status) ? c.progress : null);
      if (step !== shownStep) {
        shownStep = step;
        const bar = progressBar(LIVE.includes(c.status) ? c.progress : null);
        progress.replaceWith(bar);
        progress = bar;
      }
      const partial = c.from_step !== null && c.from_step !== undefined;
      if (partial && c.source !== source) {  // another source (checkpoint, log, history): all of it next time
        points = [];
        source = null;
        return;
      }
      points = partial ? points.filter((p) => p.step < c.from_step).concat(c.points) : c.points;
      source = c.source;
      const total = points.reduce((n, p) => n + Object.keys(p.values).length, 0);
      if (total !== shown) {
        shown = total;
        curves.replaceChildren(UI.runCharts(points));
        curves.dataset.source = c.source;
      }
      if (lastStatus !== c.status && (c.status === "complete" || lastStatus === "complete")) {
        UI.stopTimers();
        show(id);  // the final records: metrics, card, commands
        return;
      }
      lastStatus = c.status;
    }
    await poll();
    if (LIVE.includes(lastStatus) || run.status !== "complete") UI.timers.push(setInterval(poll, POLL_MS));
  }

  UI.views.run = { section: "view-run", show };
})();
