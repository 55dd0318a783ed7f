// New run (#new/RECIPE): pick a recipe, change keys in a form generated from the recipe JSON Schema
// (`nlptasks schema`, the task's [options] included), validate (every problem shown at its field),
// see the `nlptasks run ... --set ...` command, start it (queued behind --max-parallel runs), and
// the queue of runs this dashboard started, each with Stop.
"use strict";

(() => {
  const { $, el, api, say } = UI;
  let form = null;  // {id, values, schema, guarded, kept}

  function resolve(schema, node) {
    let n = node || {};
    while (n.$ref) n = schema.$defs[n.$ref.split("/").pop()] || {};
    return n;
  }

  // What a property is: {kind: "object"|"enum"|"boolean"|"string"|"value", choices, nullable, def}.
  function kindOf(schema, prop) {
    const p = resolve(schema, prop);
    const alts = (p.anyOf || [p]).map((a) => resolve(schema, a));
    const nullable = alts.some((a) => a.type === "null");
    const real = alts.filter((a) => a.type !== "null");
    const enums = real.flatMap((a) => a.enum || (a.const !== undefined ? [a.const] : []));
    if (real.length === 1 && real[0].type === "object" && real[0].properties) return { kind: "object", node: real[0] };
    if (enums.length && real.every((a) => a.enum || a.const !== undefined)) return { kind: "enum", choices: enums, nullable };
    if (real.length === 1 && real[0].type === "boolean") return { kind: "boolean", choices: [true, false], nullable };
    if (real.length === 1 && real[0].type === "string") return { kind: "string", nullable };
    return { kind: "value", nullable };
  }

  function text(value) {
    if (value === undefined || value === null) return "";
    if (typeof value === "string") return value;
    return JSON.stringify(value);
  }

  function field(schema, key, prop) {
    const p = resolve(schema, prop);
    const k = kindOf(schema, prop);
    const has = Object.prototype.hasOwnProperty.call(form.values, key);
    const current = has ? form.values[key] : p.default;
    const locked = form.kept.includes(key) || form.guarded.includes(key);
    let input;
    if (k.kind === "enum" || k.kind === "boolean") {
      const choices = k.choices.map(String);
      input = el("select", { name: key }, (!has && current === undefined) || k.nullable ? el("option", { value: "", text: "(default)" }) : null,
        choices.map((c) => el("option", { value: c, text: c })));
      input.value = current === undefined || current === null ? "" : String(current);
    } else {
      input = el("input", { name: key, type: "text", value: text(has ? current : ""), placeholder: text(p.default) || (k.nullable ? "(none)" : "") });
    }
    input.id = "f-" + key.replace(/[^A-Za-z0-9]/g, "_");
    input.dataset.initial = input.value;
    input.dataset.kind = k.kind;
    if (locked) input.disabled = true;
    const note = form.kept.includes(key) ? "set by the dashboard: runs go to its runs folder"
      : form.guarded.includes(key) ? "locked: start the dashboard with --allow-remote-code to switch it on" : "";
    const box = el("div", { class: "field", "data-key": key },
      el("span", {}, key.split(".").pop(), el("small", { text: note || p.description || "" })), input);
    box.title = key + (p.description ? ": " + p.description : "");
    input.addEventListener("input", () => {
      box.classList.toggle("changed", input.value !== input.dataset.initial);
      box.classList.remove("invalid");
      box.querySelector(".problem")?.remove();
    });
    return box;
  }

  function section(schema, prefix, node, depth) {
    const out = [];
    for (const [name, prop] of Object.entries(node.properties || {})) {
      const key = prefix ? prefix + "." + name : name;
      const k = kindOf(schema, prop);
      if (k.kind === "object") {
        const inner = section(schema, key, k.node, depth + 1);
        const changed = Object.keys(form.values).some((v) => v.startsWith(key + "."));
        out.push(el("details", { class: "section", open: depth === 0 && (changed || ["data", "train", "options"].includes(key)) },
          el("summary", { text: "[" + key + "]" }), inner));
      } else {
        out.push(field(schema, key, prop));
      }
    }
    return out;
  }

  function build() {
    const schema = form.schema;
    const top = { properties: { ...schema.properties } };
    const options = schema.$defs["options_" + form.task];
    if (options) top.properties.options = options;
    else delete top.properties.options;
    delete top.properties.task;
    $("recipe-form").replaceChildren(
      el("p", { class: "note", text: `task ${form.task} · ${form.path}` }),
      ...section(schema, "", top, 0));
  }

  function changes() {
    const out = {};
    for (const input of $("recipe-form").querySelectorAll("input, select")) {
      if (input.disabled || input.value === input.dataset.initial) continue;
      out[input.name] = input.dataset.kind === "string" && input.value !== "" ? JSON.stringify(input.value) : input.value;
    }
    return out;
  }

  function showProblems(problems, hint) {
    for (const box of document.querySelectorAll("#recipe-form .field")) {
      box.classList.remove("invalid");
      box.querySelector(".problem")?.remove();
    }
    const loose = [];
    for (const p of problems || []) {
      let key = p.where;
      let box = null;
      while (key && !(box = document.querySelector(`#recipe-form .field[data-key="${CSS.escape(key)}"]`))) {
        key = key.includes(".") ? key.slice(0, key.lastIndexOf(".")) : "";
      }
      if (box) {
        box.classList.add("invalid");
        box.closest("details")?.setAttribute("open", "");
        box.append(el("div", { class: "problem", text: (key === p.where ? "" : p.where + ": ") + p.message }));
      } else {
        loose.push(el("p", { text: (p.where ? p.where + ": " : "") + p.message }));
      }
    }
    if (hint) loose.push(el("p", { class: "note", text: hint }));
    $("form-problems").replaceChildren(...loose);
  }

  async function validate() {
    say("Validating (as nlptasks validate does)…");
    try {
      const r = await api("/api/validate", { method: "POST", body: { recipe: form.id, overrides: changes() } });
      showProblems(r.problems, r.hint);
      $("command").hidden = false;
      $("command").textContent = r.command;
      say(r.ok ? "Valid: " + (r.notes.join(" ") || "Start runs it.") : `${r.problems.length} problem(s): each is shown at its field.`, !r.ok);
      return r;
    } catch (e) {
      say(e.message, true);
      return null;
    }
  }

  async function start() {
    say("Starting…");
    try {
      const r = await api("/api/jobs", { method: "POST", body: { recipe: form.id, overrides: changes() } });
      say("Started: " + r.job.command);
      location.hash = "#run/" + r.run;
    } catch (e) {
      showProblems(e.body && e.body.problems, e.body && e.body.hint);
      say(e.message, true);
    }
  }

  async function jobs() {
    try {
      const d = await api("/api/jobs");
      $("jobs-table").querySelector("tbody").replaceChildren(...d.jobs.map((j) => el("tr", { "data-job": j.id, "data-state": j.state },
        el("td", { text: j.id }),
        el("td", {}, el("a", { href: "#run/" + runId(j), text: j.run_dir.split("/").slice(-2).join("/") })),
        el("td", {}, UI.badge(j.state, j.error)),
        el("td", {}, el("code", { text: j.command })),
        el("td", {}, ["queued", "running"].includes(j.state) ? el("button", { type: "button", class: "quiet", text: "Stop",
          onclick: () => api(`/api/jobs/${encodeURIComponent(j.id)}/stop`, { method: "POST" }).then(jobs, (e) => say(e.message, true)) }) : null),
      )));
    } catch (e) {
      say(e.message, true);
    }
  }

  function runId(job) {
    const parts = job.run_dir.split("/");
    const roots = UI.roots || [];
    const k = Math.max(0, roots.indexOf(parts.slice(0, -2).join("/")));
    return k + "/" + parts.slice(-2).join("/");
  }

  async function show(arg) {
    const select = $("recipe");
    let listing;
    try {
      listing = await api("/api/recipes");
      UI.roots = (await api("/api/runs")).roots;
    } catch (e) {
      say(e.message, true);
      return;
    }
    select.replaceChildren(el("option", { value: "", text: "choose a recipe…" }),
      ...listing.recipes.map((r) => el("option", { value: r.id, text: `${r.id} (${r.task})` })));
    const chosen = decodeURIComponent(arg || "");
    select.value = listing.recipes.some((r) => r.id === chosen) ? chosen : "";
    $("recipe-form").replaceChildren();
    $("form-problems").replaceChildren();
    $("command").hidden = true;
    jobs();
    UI.timers.push(setInterval(jobs, 2000));
    if (!select.value) {
      $("recipe-about").textContent = listing.recipes.length ? "" : "No recipes: start the dashboard with --recipes DIR.";
      return;
    }
    const about = listing.recipes.find((r) => r.id === select.value);
    $("recipe-about").textContent = about.description || "";
    try {
      form = await api("/api/recipe?id=" + encodeURIComponent(select.value));
    } catch (e) {
      say(e.message, true);
      return;
    }
    build();
    say("Change keys, then Validate or Start.");
  }

  $("recipe").addEventListener("change", (e) => { location.hash = "#new/" + encodeURIComponent(e.target.value); });
  $("validate").addEventListener("click", validate);
  $("start").addEventListener("click", start);
  $("reset-form").addEventListener("click", () => { if (form) { build(); showProblems([]); } });

  UI.views.new = { section: "view-new", show };
})();
