// Progressive enhancement for the console. Every page works without this file.
(function () {
  "use strict";

  // A live region ([data-poll]) refreshes itself with htmx polling. Skip a refresh while the tab
  // is hidden, or while the operator is using the region (ticked rows, an open traceback, a
  // focused field): swapping it then would throw their work away.
  function inUse(region) {
    if (region.querySelector("input[type=checkbox]:checked, details[open]")) {
      return true;
    }
    var focused = document.activeElement;
    return Boolean(focused && region.contains(focused) && focused.matches("input, select, textarea"));
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var region = event.detail.elt;
    if (region.hasAttribute("data-poll") && (document.hidden || inUse(region))) {
      event.preventDefault();
    }
  });

  // Back on the tab: refresh at once instead of waiting for the next tick.
  document.addEventListener("visibilitychange", function () {
    if (document.hidden || !window.htmx) {
      return;
    }
    document.querySelectorAll("[data-poll]").forEach(function (region) {
      window.htmx.trigger(region, "wake");
    });
  });

  // "Tick every row": only useful with script, so it is hidden until this runs.
  function reveal(root) {
    root.querySelectorAll("[data-select-all]").forEach(function (box) {
      box.hidden = false;
    });
  }

  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box.matches("[data-select-all]")) {
      return;
    }
    var form = box.getAttribute("data-select-all");
    document.querySelectorAll('input[name="ids"][form="' + form + '"]').forEach(function (row) {
      row.checked = box.checked;
    });
  });

  // A plain (non-htmx) form submits once, however often its button is clicked.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.hasAttribute("hx-post") || form.hasAttribute("hx-get")) {
      return;
    }
    if (form.method.toLowerCase() === "post" && form.dataset.submitted) {
      event.preventDefault();
      return;
    }
    form.dataset.submitted = "yes";
  });

  document.addEventListener("DOMContentLoaded", function () {
    reveal(document);
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    reveal(event.detail.elt.parentNode || document);
  });
})();
