// The page of `nlptasks serve`: pick a served model, try it.  Plain JavaScript, no dependencies.
// Models come from GET /ui/models (name, task, chat, inputs, labels); predictions from
// POST /v1/predict/{name}, drawn by the output's shape; chats stream from /v1/chat/completions.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const keyField = $("api-key");
  let models = [];
  let current = null;
  let history = [];   // the chat so far: [{role, content}]
  let controller = null;

  keyField.value = sessionStorage.getItem("nlptasks-api-key") || "";

  function headers(json) {
    const h = {};
    if (json) h["Content-Type"] = "application/json";
    const key = keyField.value.trim();
    if (key) h["Authorization"] = "Bearer " + key;
    return h;
  }

  function say(text, isError) {
    const status = $("status");
    status.textContent = text || "";
    status.className = isError ? "error" : "";
  }

  async function errorText(resp) {
    try {
      const body = await resp.json();
      return (body.error && body.error.message) || body.detail || JSON.stringify(body);
    } catch (e) {
      return resp.status + " " + resp.statusText;
    }
  }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k === "style") node.style.cssText = v;
      else node.setAttribute(k, v);
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  // A stable colour per entity type or label.
  function hue(text) {
    let h = 0;
    for (const ch of String(text)) h = (h * 31 + ch.codePointAt(0)) % 360;
    return h;
  }

  // -- models ---------------------------------------------------------------------------------

  async function loadModels() {
    say("Loading the models…");
    let resp;
    try {
      resp = await fetch("/ui/models", { headers: headers(false) });
    } catch (e) {
      say("The server cannot be reached: " + e, true);
      return;
    }
    if (resp.status === 401) {
      $("model").replaceChildren();
      show(null);
      say("This server needs an API key: type it above (the key it was started with).", true);
      keyField.focus();
      return;
    }
    if (!resp.ok) {
      say(await errorText(resp), true);
      return;
    }
    models = (await resp.json()).models;
    const previous = sessionStorage.getItem("nlptasks-model");
    $("model").replaceChildren(...models.map((m) =>
      el("option", { value: m.name }, `${m.name} (${m.task}${m.chat ? ", chat" : ""})`)));
    if (models.some((m) => m.name === previous)) $("model").value = previous;
    say(models.length ? "" : "No models are served.");
    choose();
  }

  function choose() {
    current = models.find((m) => m.name === $("model").value) || null;
    if (current) sessionStorage.setItem("nlptasks-model", current.name);
    show(current);
  }

  function show(model) {
    $("result").replaceChildren();
    $("predict-form").hidden = !model || model.chat;
    $("chat").hidden = !model || !model.chat;
    if (!model) {
      $("about").textContent = "";
      return;
    }
    const labels = model.labels && model.labels.length ? " · labels: " + model.labels.join(", ") : "";
    $("about").textContent = `task: ${model.task}${labels}`;
    if (model.chat) {
      newChat();
      return;
    }
    $("inputs").replaceChildren(...model.inputs.map((field, i) => el("label", { class: "field" },
      el("span", {}, model.inputs.length > 1 ? field.name : "Text"),
      el("textarea", { id: "input-" + i, rows: "3", placeholder: field.example || "" }))));
  }

  // -- predictions ----------------------------------------------------------------------------

  async function predict(event) {
    event.preventDefault();
    const model = current;
    const texts = model.inputs.map((_, i) => $("input-" + i).value);
    if (texts.some((t) => !t.trim())) {
      say(model.inputs.length > 1 ? "Type a text in every field." : "Type a text first.", true);
      return;
    }
    // One input: a text, or the fields of a pair joined by TABs (as `nlptasks infer` reads them).
    const input = texts.length === 1 ? texts[0] : texts.map((t) => t.replace(/\t/g, " ")).join("\t");
    say("Predicting…");
    $("run").disabled = true;
    try {
      const resp = await fetch("/v1/predict/" + encodeURIComponent(model.name), {
        method: "POST", headers: headers(true), body: JSON.stringify({ inputs: [input] }),
      });
      if (!resp.ok) {
        say(await errorText(resp), true);
        return;
      }
      const output = (await resp.json()).outputs[0];
      say("");
      render(output, texts);
    } catch (e) {
      say("The request failed: " + e, true);
    } finally {
      $("run").disabled = false;
    }
  }

  function bar(name, value, colour) {
    const pct = Math.max(0, Math.min(1, value)) * 100;
    return el("div", { class: "bar" },
      el("span", { class: "bar-name" }, name),
      el("span", { class: "bar-track" }, el("span", { class: "bar-fill", style: `width:${pct}%;background:${colour}` })),
      el("span", { class: "bar-value" }, value.toFixed(4)));
  }

  // Draw an output by its shape: entities with offsets, labels (multi-label), a label (with scores), or a score.
  function render(output, texts) {
    const box = $("result");
    const parts = [];
    if (Array.isArray(output.entities)) {
      const text = typeof output.text === "string" ? output.text : texts[0];
      const para = el("p", { class: "highlighted" });
      let at = 0;
      const entities = output.entities
        .filter((e) => Number.isInteger(e.start) && Number.isInteger(e.end) && e.end > e.start)
        .sort((a, b) => a.start - b.start);
      for (const e of entities) {
        if (e.start < at) continue;  // overlapping: the first one is drawn
        para.append(text.slice(at, e.start));
        const colour = `hsl(${hue(e.type)} 80% 85%)`;
        const title = e.type + (typeof e.score === "number" ? ` ${e.score.toFixed(3)}` : "");
        para.append(el("span", { class: "entity", "data-type": e.type, title: title, style: `background:${colour}` },
          text.slice(e.start, e.end)));
        para.append(el("sup", { class: "entity-type" }, e.type));
        at = e.end;
      }
      para.append(text.slice(at));
      parts.push(para);
      parts.push(el("p", { class: "note" }, entities.length ? `${entities.length} entities` : "No entities found."));
    } else if (Array.isArray(output.labels)) {
      // multi-label: every label at or above its threshold, then every label's probability
      parts.push(el("p", { class: "label-line", id: "labels-line" }, "Labels ",
        ...(output.labels.length
          ? output.labels.map((name) => el("strong", { class: "label-chip", style: `background:hsl(${hue(name)} 80% 88%)` }, String(name)))
          : [el("em", {}, "none above its threshold")])));
      if (output.scores && typeof output.scores === "object") {
        const scores = Object.entries(output.scores).filter(([, v]) => typeof v === "number")
          .sort((a, b) => b[1] - a[1]);
        parts.push(el("div", { class: "bars" },
          ...scores.map(([name, v]) => bar(name, v, `hsl(${hue(name)} 70% 55%)`))));
      }
    } else if (output.label !== undefined && output.label !== null) {
      parts.push(el("p", { class: "label-line" }, "Label ",
        el("strong", { id: "label-name", style: `background:hsl(${hue(output.label)} 80% 88%)` }, String(output.label))));
      if (output.scores && typeof output.scores === "object") {
        const scores = Object.entries(output.scores).filter(([, v]) => typeof v === "number")
          .sort((a, b) => b[1] - a[1]);
        parts.push(el("div", { class: "bars" },
          ...scores.map(([name, v]) => bar(name, v, `hsl(${hue(name)} 70% 55%)`))));
      } else if (typeof output.score === "number") {
        parts.push(el("div", { class: "bars" }, bar(String(output.label), output.score, `hsl(${hue(output.label)} 70% 55%)`)));
      }
    } else if (typeof output.score === "number") {
      parts.push(el("p", { class: "label-line" }, "Score ", el("strong", { id: "score-value" }, output.score.toFixed(4))));
      if (output.score >= 0 && output.score <= 1) parts.push(el("div", { class: "bars" }, bar("score", output.score, "#3b7dd8")));
    }
    parts.push(el("details", {}, el("summary", {}, "JSON"), el("pre", {}, JSON.stringify(output, null, 2))));
    box.replaceChildren(...parts);
  }

  // -- chat -----------------------------------------------------------------------------------

  function newChat() {
    if (controller) controller.abort();
    history = [];
    $("chat-log").replaceChildren();
  }

  function bubble(role, text) {
    const node = el("div", { class: "msg " + role }, el("span", { class: "who" }, role), el("div", { class: "text" }, text));
    $("chat-log").append(node);
    node.scrollIntoView({ block: "end" });
    return node;
  }

  async function send(event) {
    if (event) event.preventDefault();
    const text = $("chat-input").value;
    if (!text.trim() || controller) return;
    $("chat-input").value = "";
    history.push({ role: "user", content: text });
    bubble("user", text);
    const reply = bubble("assistant", "");
    const out = reply.querySelector(".text");
    const body = { model: current.name, messages: history, stream: true };
    const maxTokens = parseInt($("max-tokens").value, 10);
    if (maxTokens > 0) body.max_tokens = maxTokens;
    const temperature = parseFloat($("temperature").value);
    if (!Number.isNaN(temperature)) body.temperature = temperature;
    controller = new AbortController();
    $("chat-send").disabled = true;
    $("chat-stop").disabled = false;
    let answer = "";
    let finish = null;
    try {
      const resp = await fetch("/v1/chat/completions", {
        method: "POST", headers: headers(true), body: JSON.stringify(body), signal: controller.signal,
      });
      if (!resp.ok) throw new Error(await errorText(resp));
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      let done = false;
      while (!done) {
        const chunk = await reader.read();
        if (chunk.done) break;
        buffer += decoder.decode(chunk.value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const event = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          for (const line of event.split("\n")) {
            if (!line.startsWith("data: ")) continue;
            const data = line.slice(6);
            if (data === "[DONE]") { done = true; break; }
            const obj = JSON.parse(data);
            if (obj.error) throw new Error(obj.error.message);
            const choice = (obj.choices || [])[0];
            if (!choice) continue;
            if (choice.delta && choice.delta.content) {
              answer += choice.delta.content;
              out.textContent = answer;
            }
            if (choice.finish_reason) finish = choice.finish_reason;
          }
        }
      }
      history.push({ role: "assistant", content: answer });
      if (finish === "length") reply.append(el("span", { class: "note" }, "(cut at max tokens)"));
    } catch (e) {
      if (e.name === "AbortError") {
        reply.append(el("span", { class: "note" }, "(stopped)"));
        if (answer) history.push({ role: "assistant", content: answer });
        else history.pop();
      } else {
        history.pop();
        reply.classList.add("error");
        out.textContent = answer + (answer ? "\n" : "") + String(e.message || e);
      }
    } finally {
      reply.setAttribute("data-done", finish || "error");
      controller = null;
      $("chat-send").disabled = false;
      $("chat-stop").disabled = true;
    }
  }

  // -- wiring ---------------------------------------------------------------------------------

  $("model").addEventListener("change", choose);
  keyField.addEventListener("change", () => {
    sessionStorage.setItem("nlptasks-api-key", keyField.value.trim());
    loadModels();
  });
  $("predict-form").addEventListener("submit", predict);
  $("use-example").addEventListener("click", () => {
    current.inputs.forEach((field, i) => { $("input-" + i).value = field.example || ""; });
  });
  $("chat-form").addEventListener("submit", send);
  $("chat-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) send(e);
  });
  $("chat-stop").addEventListener("click", () => { if (controller) controller.abort(); });
  $("chat-new").addEventListener("click", newChat);
  loadModels();
})();
