// What every view of `nlptasks ui` shares: DOM helpers, the API client (with the API key), the
// status line, number formatting and a small Markdown renderer for run cards.  Plain JavaScript,
// no dependencies; the views register themselves in UI.views and app.js routes between them.
"use strict";

const UI = (() => {
  const $ = (id) => document.getElementById(id);
  const keyField = $("api-key");
  keyField.value = sessionStorage.getItem("nlptasks-ui-key") || "";
  keyField.addEventListener("change", () => {
    sessionStorage.setItem("nlptasks-ui-key", keyField.value.trim());
    window.dispatchEvent(new HashChangeEvent("hashchange"));
  });

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined && child !== false) node.append(child);
    }
    return node;
  }

  function headers(json) {
    const h = {};
    if (json) h["Content-Type"] = "application/json";
    const key = keyField.value.trim();
    if (key) h["Authorization"] = "Bearer " + key;
    return h;
  }

  // An API error: the server's message (it names the field), the status and the whole body.
  class ApiError extends Error {
    constructor(status, message, body) {
      super(message);
      this.status = status;
      this.body = body || {};
    }
  }

  async function api(path, options) {
    const opts = options || {};
    let resp;
    try {
      resp = await fetch(path, {
        method: opts.method || "GET",
        headers: headers(opts.body !== undefined),
        body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined,
      });
    } catch (e) {
      throw new ApiError(0, "the dashboard cannot be reached (is `nlptasks ui` still running?): " + e);
    }
    let body = null;
    try {
      body = await resp.json();
    } catch (e) {
      body = null;
    }
    if (!resp.ok) {
      let message = (body && body.error && body.error.message) || resp.status + " " + resp.statusText;
      if (resp.status === 401) message += " (type the key in the API key field above)";
      throw new ApiError(resp.status, message, body);
    }
    return body;
  }

  function say(text, isError) {
    const status = $("status");
    status.textContent = text || "";
    status.className = isError ? "error" : "";
  }

  function num(value, digits) {
    if (typeof value !== "number" || !isFinite(value)) return value === null || value === undefined ? "-" : String(value);
    if (digits !== undefined) return value.toFixed(digits);
    if (Number.isInteger(value)) return String(value);
    return Math.abs(value) >= 0.001 ? value.toFixed(4) : value.toExponential(1);
  }

  function seconds(value) {
    if (typeof value !== "number") return "-";
    if (value < 90) return value.toFixed(1) + " s";
    if (value < 5400) return (value / 60).toFixed(1) + " min";
    return (value / 3600).toFixed(1) + " h";
  }

  function badge(status, note) {
    return el("span", {}, el("span", { class: "badge " + status, "data-status": status, text: status }),
      note ? el("span", { class: "status-note", text: note }) : null);
  }

  // Pictures of a run's card load through the API (so the key goes with them) as object URLs.
  async function picture(img, runId, name) {
    try {
      const resp = await fetch("/api/run/file?id=" + encodeURIComponent(runId) + "&name=" + encodeURIComponent(name),
        { headers: headers(false) });
      if (resp.ok) img.src = URL.createObjectURL(await resp.blob());
      else img.alt = name + " (" + resp.status + ")";
    } catch (e) {
      img.alt = name + " (not loaded)";
    }
  }

  // -- Markdown: what run cards and nlptasks compare use (headings, tables, code, lists, inline) --

  function inline(text, runId) {
    const out = [];
    const pattern = /(`[^`]+`|\*\*[^*]+\*\*|!\[[^\]]*\]\([^)]+\)|\[[^\]]+\]\([^)]+\))/g;
    let last = 0;
    for (const m of text.matchAll(pattern)) {
      if (m.index > last) out.push(text.slice(last, m.index));
      const t = m[0];
      if (t.startsWith("`")) out.push(el("code", { text: t.slice(1, -1) }));
      else if (t.startsWith("**")) out.push(el("strong", { text: t.slice(2, -2) }));
      else if (t.startsWith("!")) {
        const [, alt, src] = t.match(/!\[([^\]]*)\]\(([^)]+)\)/);
        const img = el("img", { alt: alt });
        if (runId && !/^[a-z]+:|^\//i.test(src)) picture(img, runId, src);
        out.push(img);
      } else {
        const [, label, href] = t.match(/\[([^\]]+)\]\(([^)]+)\)/);
        out.push(/^https?:|^#/.test(href) ? el("a", { href: href, text: label }) : label);
      }
      last = m.index + t.length;
    }
    if (last < text.length) out.push(text.slice(last));
    return out;
  }

  function cells(line) {
    return line.trim().replace(/^\|/, "").replace(/\|$/, "").split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
  }

  function markdown(text, runId) {
    const root = el("div", { class: "markdown" });
    const lines = String(text || "").split("\n");
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      if (/^```/.test(line)) {
        const body = [];
        i++;
        while (i < lines.length && !/^```/.test(lines[i])) body.push(lines[i++]);
        root.append(el("pre", {}, el("code", { text: body.join("\n") })));
        i++;
      } else if (/^#{1,6} /.test(line)) {
        const level = line.match(/^#+/)[0].length;
        root.append(el("h" + Math.min(level + 1, 6), {}, inline(line.slice(level + 1), runId)));
        i++;
      } else if (/^\s*\|/.test(line)) {
        const rows = [];
        while (i < lines.length && /^\s*\|/.test(lines[i])) rows.push(lines[i++]);
        const table = el("table", { class: "grid" });
        const head = cells(rows[0]);
        const body = rows.slice(1).filter((r) => !/^\s*\|[\s:|-]+\|\s*$/.test(r));
        table.append(el("thead", {}, el("tr", {}, head.map((c) => el("th", {}, inline(c, runId))))));
        table.append(el("tbody", {}, body.map((r) => el("tr", {}, cells(r).map((c) => el("td", {}, inline(c, runId)))))));
        root.append(table);
      } else if (/^\s*([-*]|\d+\.) /.test(line)) {
        const ordered = /^\s*\d+\./.test(line);
        const list = el(ordered ? "ol" : "ul");
        while (i < lines.length && /^\s*([-*]|\d+\.) /.test(lines[i])) {
          list.append(el("li", {}, inline(lines[i].replace(/^\s*([-*]|\d+\.) /, ""), runId)));
          i++;
        }
        root.append(list);
      } else if (line.trim() === "") {
        i++;
      } else {
        const para = [];
        while (i < lines.length && lines[i].trim() !== "" && !/^(```|#{1,6} |\s*\||\s*([-*]|\d+\.) )/.test(lines[i])) {
          para.push(lines[i++]);
        }
        root.append(el("p", {}, inline(para.join(" "), runId)));
      }
    }
    return root;
  }

  function table(columns, rows) {
    return el("table", { class: "grid" },
      el("thead", {}, el("tr", {}, columns.map((c) => el("th", { class: c.num ? "num" : null, text: c.label })))),
      el("tbody", {}, rows.map((r) => el("tr", {}, columns.map((c) => {
        const v = c.value(r);
        return el("td", { class: c.num ? "num" : null }, v instanceof Node ? v : String(v));
      })))));
  }

  return { $, el, api, ApiError, say, num, seconds, badge, markdown, table, views: {}, timers: [] };
})();
