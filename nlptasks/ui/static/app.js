// The page of `nlptasks ui`: routes the address's #fragment to a view (runs, run, compare, new,
// studies).  Each view lives in its own file and registers itself in UI.views; a view's timers
// (the live polls) stop when another view opens.
"use strict";

(() => {
  UI.stopTimers = () => {
    while (UI.timers.length) clearInterval(UI.timers.pop());
  };

  async function route() {
    UI.stopTimers();
    const hash = location.hash.replace(/^#/, "") || "runs";
    const [name, ...rest] = hash.split("/");
    const view = UI.views[name] || UI.views.runs;
    for (const section of document.querySelectorAll(".view")) section.hidden = section.id !== view.section;
    for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.id === "nav-" + (name === "run" || name === "compare" ? "runs" : name));
    try {
      await view.show(rest.join("/"));
    } catch (e) {
      UI.say("This view failed: " + e, true);
    }
    document.body.dataset.view = name;
  }

  window.addEventListener("hashchange", route);
  route();
})();
