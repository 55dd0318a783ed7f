// Line charts as inline SVG: training curves (loss, learning rate, validation metrics by step), one
// chart per run or one chart for several runs.  No library: axes with round ticks, a polyline and
// dots per series (each dot's title gives its step and value), a legend.
"use strict";

(() => {
  const { el } = UI;
  const NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#3b7dd8", "#d8663b", "#2e9c5a", "#9b4dd8", "#c0392b", "#1f9bb0", "#b08a1f", "#555"];

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    for (const c of children) if (c) node.append(c);
    return node;
  }

  function ticks(low, high, count) {
    if (low === high) {
      low -= Math.abs(low) * 0.1 || 1;
      high += Math.abs(high) * 0.1 || 1;
    }
    const raw = (high - low) / count;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((s) => s >= raw) || raw;
    const start = Math.floor(low / step) * step;
    const out = [];
    for (let v = start; v <= high + step * 0.5; v += step) out.push(Number(v.toPrecision(12)));
    return out;
  }

  function label(v) {
    const a = Math.abs(v);
    if (a !== 0 && (a < 0.001 || a >= 1e5)) return v.toExponential(1);
    return String(Number(v.toPrecision(4)));
  }

  // A long curve drawn with at most the lowest and the highest point of each pixel column, in step
  // order: the same picture (spikes kept) from a few hundred points instead of thousands, so a page
  // left open on a long run redraws it cheaply.
  function thin(points, X) {
    if (points.length <= 600) return points;
    const out = [];
    let column = null, low = null, high = null;
    const flush = () => {
      if (low === null) return;
      if (low === high) out.push(low);
      else if (low[0] <= high[0]) out.push(low, high);
      else out.push(high, low);
    };
    for (const p of points) {
      const x = Math.round(X(p[0]));
      if (x !== column) { flush(); column = x; low = high = p; continue; }
      if (p[1] < low[1]) low = p;
      if (p[1] > high[1]) high = p;
    }
    flush();
    return out;
  }

  // series: [{name, points: [[step, value], ...]}]; options: {title, height}.
  function chart(series, options) {
    const opts = options || {};
    const width = 720;
    const height = opts.height || 260;
    const pad = { left: 56, right: 16, top: 18, bottom: 34 };
    const all = series.flatMap((s) => s.points).filter((p) => isFinite(p[0]) && isFinite(p[1]));
    const box = el("div", { class: "chart", "data-points": String(all.length), "data-series": String(series.length) });
    if (opts.title) box.append(el("div", { class: "note", text: opts.title }));
    if (!all.length) {
      box.append(el("p", { class: "note", text: opts.empty || "No points yet." }));
      return box;
    }
    const xs = ticks(Math.min(...all.map((p) => p[0])), Math.max(...all.map((p) => p[0])), 6);
    const ys = ticks(Math.min(...all.map((p) => p[1])), Math.max(...all.map((p) => p[1])), 5);
    const [x0, x1, y0, y1] = [xs[0], xs[xs.length - 1], ys[0], ys[ys.length - 1]];
    const X = (v) => pad.left + ((v - x0) / (x1 - x0 || 1)) * (width - pad.left - pad.right);
    const Y = (v) => height - pad.bottom - ((v - y0) / (y1 - y0 || 1)) * (height - pad.top - pad.bottom);
    const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": opts.title || "chart" });
    for (const t of ys) {
      root.append(svg("line", { x1: pad.left, x2: width - pad.right, y1: Y(t), y2: Y(t), stroke: "#e3e7ee" }));
      const text = svg("text", { x: pad.left - 6, y: Y(t) + 4, "text-anchor": "end", "font-size": 11, fill: "#5d6677" });
      text.textContent = label(t);
      root.append(text);
    }
    for (const t of xs) {
      const text = svg("text", { x: X(t), y: height - pad.bottom + 16, "text-anchor": "middle", "font-size": 11, fill: "#5d6677" });
      text.textContent = label(t);
      root.append(text);
    }
    const axis = svg("text", { x: width - pad.right, y: height - 4, "text-anchor": "end", "font-size": 11, fill: "#5d6677" });
    axis.textContent = opts.xLabel || "step";
    root.append(axis);
    const legend = el("div", { class: "legend" });
    series.forEach((s, i) => {
      const color = COLORS[i % COLORS.length];
      const points = s.points.filter((p) => isFinite(p[0]) && isFinite(p[1])).sort((a, b) => a[0] - b[0]);
      const group = svg("g", { "data-name": s.name });
      if (points.length > 1) {
        group.append(svg("polyline", {
          points: thin(points, X).map((p) => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`).join(" "),
          fill: "none", stroke: color, "stroke-width": 2,
        }));
      }
      for (const p of points.length <= 300 ? points : []) {  // dots with their values; a long curve is its line
        const dot = svg("circle", { cx: X(p[0]).toFixed(1), cy: Y(p[1]).toFixed(1), r: 2.6, fill: color });
        const title = svg("title");
        title.textContent = `${s.name} at step ${p[0]}: ${label(p[1])}`;
        dot.append(title);
        group.append(dot);
      }
      root.append(group);
      legend.append(el("span", {}, el("i", { style: "background:" + color }), s.name + " (" + points.length + ")"));
    });
    box.append(root, legend);
    return box;
  }

  // The series of a run's points: {name: [[step, value], ...]} for each value name.
  function seriesOf(points) {
    const out = {};
    for (const p of points || []) {
      for (const [name, value] of Object.entries(p.values || {})) {
        (out[name] = out[name] || []).push([p.step, value]);
      }
    }
    return out;
  }

  // A run's charts: losses (training and validation) on one, validation metrics on another.
  function runCharts(points) {
    const series = seriesOf(points);
    const losses = Object.keys(series).filter((n) => n === "loss" || n === "eval_loss");
    const metrics = Object.keys(series).filter((n) => n.startsWith("eval_") && n !== "eval_loss");
    const box = el("div", { class: "charts" });
    box.append(chart(losses.map((n) => ({ name: n, points: series[n] })), { title: "loss", empty: "No loss logged yet (train.logging_steps)." }));
    if (metrics.length) box.append(chart(metrics.map((n) => ({ name: n, points: series[n] })), { title: "validation metrics" }));
    return box;
  }

  UI.chart = chart;
  UI.seriesOf = seriesOf;
  UI.runCharts = runCharts;
})();
