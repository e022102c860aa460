// Progressive enhancement for the console. Every page works without this file.
(function () {
  "use strict";

  // --- live refresh --------------------------------------------------------------------------
  // A live region ([data-poll]) refreshes itself with htmx polling. A refresh is skipped while the
  // tab is hidden, while the operator turned live refresh off (remembered in localStorage), or
  // while they are using the region (ticked rows, an open traceback, a focused field): swapping
  // it then would throw their work away. The indicator in the top bar says which.
  var LIVE_KEY = "jobsite.live-refresh";

  function liveOff() {
    try {
      return window.localStorage.getItem(LIVE_KEY) === "off";
    } catch (error) {
      return false;
    }
  }

  function setLiveOff(off) {
    try {
      if (off) {
        window.localStorage.setItem(LIVE_KEY, "off");
      } else {
        window.localStorage.removeItem(LIVE_KEY);
      }
    } catch (error) {
      // Storage refused (private mode): the choice lasts for this page only.
    }
  }

  // Why `region` should not refresh now, in words, or "" when it may.
  function pauseReason(region) {
    if (liveOff()) {
      return "Live refresh off";
    }
    // A confirmation open over the page: its form must still be there when it is answered.
    if (document.querySelector("dialog[open]")) {
      return "Paused while a dialog is open";
    }
    if (region.querySelector("details[open]")) {
      return "Paused: a traceback is open";
    }
    if (region.querySelector("input[type=checkbox]:checked")) {
      return "Paused: rows are ticked";
    }
    var focused = document.activeElement;
    if (focused && region.contains(focused) && focused.matches("input, select, textarea")) {
      return "Paused while you use a field";
    }
    return "";
  }

  function liveRegions() {
    return document.querySelectorAll("[data-poll]");
  }

  function showLiveStatus() {
    var status = document.querySelector("[data-live-status]");
    var toggle = document.querySelector("[data-live-toggle]");
    if (!status || !toggle) {
      return;
    }
    var regions = liveRegions();
    status.hidden = toggle.hidden = regions.length === 0;
    var reason = "";
    regions.forEach(function (region) {
      reason = reason || pauseReason(region);
    });
    setText(status, reason || "Live", reason || "Live: this page refreshes itself");
    status.classList.toggle("is-paused", Boolean(reason));
    toggle.setAttribute("aria-pressed", liveOff() ? "false" : "true");
    var action = liveOff() ? "Turn live refresh on" : "Turn live refresh off";
    setText(toggle, action, action);
  }

  // Only a change is written: writing the same text replaces the element's text node, and a
  // button whose text node is replaced between the press and the release gets no click (the
  // status is shown again on every refresh and focus change, so a pressed toggle lost its click).
  function setText(element, text, title) {
    if (element.textContent !== text) {
      element.textContent = text;
    }
    if (element.title !== title) {
      element.title = title;
    }
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var region = event.detail.elt;
    if (region.hasAttribute("data-poll") && (document.hidden || pauseReason(region))) {
      event.preventDefault();
    }
    showLiveStatus();
  });

  // The element a pointer is pressed on, until its release (and the click that makes).
  var pressed = null;
  document.addEventListener("pointerdown", function (event) {
    pressed = event.target;
  }, true);
  ["pointerup", "pointercancel"].forEach(function (name) {
    document.addEventListener(name, function () {
      // After the click the release makes, which comes in the same turn.
      window.setTimeout(function () {
        pressed = null;
      }, 0);
    }, true);
  });

  // A refresh already on its way when the operator ticked a row, opened a traceback or a dialog,
  // or stepped into a field lands after that: dropping it keeps what they did on the page.
  // So is one landing while a pointer is pressed in the region: swapping the pressed button away
  // before its release would lose the click.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var region = event.detail.elt;
    var held = pressed && region.contains(pressed);
    if (region.hasAttribute("data-poll") && (held || pauseReason(region))) {
      event.detail.shouldSwap = false;
    }
  });

  // Back on the tab, or live refresh turned back on: refresh at once instead of on the next tick.
  function wakeAll() {
    if (!window.htmx) {
      return;
    }
    liveRegions().forEach(function (region) {
      window.htmx.trigger(region, "wake");
    });
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      wakeAll();
    }
  });

  document.addEventListener("click", function (event) {
    if (!event.target.closest("[data-live-toggle]")) {
      return;
    }
    setLiveOff(!liveOff());
    showLiveStatus();
    if (!liveOff()) {
      wakeAll();
    }
  });

  // Opening a traceback, ticking a row or moving focus can pause or resume the refresh.
  ["focusin", "focusout", "change"].forEach(function (name) {
    document.addEventListener(name, function () {
      window.setTimeout(showLiveStatus, 0);
    });
  });
  document.addEventListener("toggle", showLiveStatus, true);

  // --- selecting rows for bulk actions ---------------------------------------------------------
  // "Tick every row": only useful with script, so it is hidden until this runs.
  function reveal(root) {
    root.querySelectorAll("[data-select-all], [data-needs-script]").forEach(function (element) {
      element.hidden = false;
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

  // --- confirmations ---------------------------------------------------------------------------
  // A form with data-confirm posts confirm=ask, which the server answers with a page that asks.
  // Here the question is asked in a modal dialog instead (the rest of the page is inert while
  // it is open, Esc goes back), and a confirmed form posts confirm=yes. This listener runs in
  // the capture phase, before htmx's own submit handler on the form.
  var confirmDialog = null;

  function buildConfirmDialog() {
    var dialog = document.createElement("dialog");
    dialog.className = "dialog confirm-dialog";
    dialog.setAttribute("aria-labelledby", "confirm-dialog-question");
    dialog.innerHTML =
      '<form method="dialog">' +
      '<p id="confirm-dialog-question" class="dialog-question"></p>' +
      '<div class="actions">' +
      '<button type="submit" value="back" class="button button-quiet">Go back</button>' +
      '<button type="submit" value="confirm" class="button" data-confirm-verb autofocus></button>' +
      "</div></form>";
    document.body.appendChild(dialog);
    return dialog;
  }

  // Ask `source` (a form, or a list's row button) its data-confirm question; `proceed` acts
  // once the operator confirms, if the source is still on the page.
  function askFirst(source, proceed) {
    confirmDialog = confirmDialog || buildConfirmDialog();
    var dialog = confirmDialog;
    var verb = source.matches("form")
      ? source.querySelector("button[type=submit], button:not([type])")
      : source;
    var label = source.getAttribute("data-confirm-label") || (verb ? verb.textContent.trim() : "Confirm");
    dialog.querySelector(".dialog-question").textContent = source.getAttribute("data-confirm");
    var confirmButton = dialog.querySelector("[data-confirm-verb]");
    confirmButton.textContent = label;
    confirmButton.className = "button button-" + (source.getAttribute("data-action") || "confirm");
    dialog.returnValue = "";
    dialog.onclose = function () {
      dialog.onclose = null;
      window.setTimeout(showLiveStatus, 0);
      if (dialog.returnValue !== "confirm" || !source.isConnected) {
        return;
      }
      proceed();
    };
    dialog.showModal();
    confirmButton.focus();
  }

  document.addEventListener(
    "submit",
    function (event) {
      var form = event.target;
      var field = form.querySelector('input[name="confirm"]');
      if (!form.hasAttribute("data-confirm") || !field || field.value !== "ask") {
        return;
      }
      event.preventDefault();
      event.stopImmediatePropagation();
      askFirst(form, function () {
        field.value = "yes";
        form.requestSubmit();
        // The request took its values as it was issued; the form asks again next time.
        field.value = "ask";
      });
    },
    true
  );

  // A list's row buttons share one form (see the row_actions tag) and post through htmx, which
  // asks here before it sends: a button with a question waits for the answer, then its request
  // goes with confirm=yes.
  document.addEventListener("htmx:confirm", function (event) {
    var button = event.detail.elt;
    if (!button.hasAttribute("data-confirm") || button.value !== "ask") {
      return;
    }
    event.preventDefault();
    askFirst(button, function () {
      button.value = "yes";
      event.detail.issueRequest(true);
      button.value = "ask";
    });
  });

  // A plain (non-htmx) form submits once, however often its button is clicked.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (event.defaultPrevented || form.hasAttribute("hx-post") || form.hasAttribute("hx-get")) {
      return;
    }
    if (form.method.toLowerCase() === "post" && form.dataset.submitted) {
      event.preventDefault();
      return;
    }
    form.dataset.submitted = "yes";
  });

  // --- keyboard triage -------------------------------------------------------------------------
  // j/k move the selection through the job rows ([data-job-row]), Enter opens the selected job,
  // r retries it (or the job of the page), / goes to the search field, ? lists these keys.
  // The selection is kept by job id, so it survives a live refresh of the list.
  var selectedId = null;
  var helpDialog = null;
  var SHORTCUTS = [
    ["j", "Select the next job"],
    ["k", "Select the previous job"],
    ["Enter", "Open the selected job"],
    ["r", "Retry the selected job (or the job on its page)"],
    ["/", "Search (the job list, from a page with no search)"],
    ["?", "Show these shortcuts"],
    ["Esc", "Close a dialog"],
  ];

  function jobRows() {
    return Array.prototype.slice.call(document.querySelectorAll("[data-job-row]"));
  }

  function selectedRow() {
    return jobRows().filter(function (row) {
      return row.getAttribute("data-job-id") === selectedId;
    })[0];
  }

  function markSelection() {
    jobRows().forEach(function (row) {
      var on = row.getAttribute("data-job-id") === selectedId;
      row.classList.toggle("is-selected", on);
      if (on) {
        row.setAttribute("aria-current", "true");
      } else {
        row.removeAttribute("aria-current");
      }
    });
  }

  function move(step) {
    var rows = jobRows();
    if (!rows.length) {
      return;
    }
    var index = rows.indexOf(selectedRow());
    index = index < 0 ? (step > 0 ? 0 : rows.length - 1) : index + step;
    index = Math.max(0, Math.min(rows.length - 1, index));
    selectedId = rows[index].getAttribute("data-job-id");
    markSelection();
    rows[index].scrollIntoView({ block: "nearest" });
  }

  function retrySelected() {
    var scope = selectedRow() || (jobRows().length ? null : document);
    // A form of its own (a job's page) or a button of the list's action form (a row).
    var control = scope && scope.querySelector('[data-action="retry"]');
    if (control && control.matches("form")) {
      control.requestSubmit();
    } else if (control) {
      control.click();
    }
  }

  function openSelected() {
    var row = selectedRow();
    if (row && row.getAttribute("data-href")) {
      window.location.assign(row.getAttribute("data-href"));
    }
  }

  function buildHelpDialog() {
    var dialog = document.createElement("dialog");
    dialog.className = "dialog help-dialog";
    dialog.setAttribute("aria-labelledby", "help-dialog-title");
    var rows = SHORTCUTS.map(function (pair) {
      return "<dt><kbd>" + pair[0] + "</kbd></dt><dd>" + pair[1] + "</dd>";
    }).join("");
    dialog.innerHTML =
      '<form method="dialog"><h2 id="help-dialog-title">Keyboard shortcuts</h2>' +
      '<dl class="shortcuts">' + rows + "</dl>" +
      '<div class="actions"><button type="submit" class="button" autofocus>Close</button></div>' +
      "</form>";
    document.body.appendChild(dialog);
    return dialog;
  }

  function showHelp() {
    helpDialog = helpDialog || buildHelpDialog();
    if (!helpDialog.open) {
      helpDialog.showModal();
    }
  }

  function typing(element) {
    return Boolean(
      element && (element.isContentEditable || element.matches("input, select, textarea"))
    );
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) {
      return;
    }
    if (typing(event.target) || document.querySelector("dialog[open]")) {
      return;
    }
    var search = document.querySelector('input[type="search"][name="q"]');
    switch (event.key) {
      case "j":
        move(1);
        break;
      case "k":
        move(-1);
        break;
      case "Enter":
        if (!selectedRow() || event.target.closest("a, button")) {
          return;
        }
        openSelected();
        break;
      case "r":
        retrySelected();
        break;
      case "/":
        if (!search) {
          // No search on this page: search the job list.
          var jobs = document.querySelector('meta[name="jobsite-search"]');
          if (!jobs) {
            return;
          }
          window.location.assign(jobs.getAttribute("content") + "#search");
          break;
        }
        search.focus();
        search.select();
        break;
      case "?":
        showHelp();
        break;
      default:
        return;
    }
    event.preventDefault();
  });

  document.addEventListener("click", function (event) {
    if (event.target.closest("[data-shortcuts-help]")) {
      showHelp();
    }
  });

  // --- row density -----------------------------------------------------------------------------
  // Lists are compact by default on wide screens (the stylesheet decides); a choice made here
  // is remembered and wins on any screen.
  var DENSITY_KEY = "jobsite.density";
  var WIDE = "(min-width: 1200px)";

  function density() {
    var chosen = null;
    try {
      chosen = window.localStorage.getItem(DENSITY_KEY);
    } catch (error) {
      chosen = null;
    }
    return chosen || (window.matchMedia(WIDE).matches ? "compact" : "comfortable");
  }

  function showDensity() {
    var current = density();
    document.documentElement.setAttribute("data-density", current);
    document.querySelectorAll("[data-density-toggle]").forEach(function (button) {
      button.textContent = current === "compact" ? "Comfortable rows" : "Compact rows";
    });
  }

  document.addEventListener("click", function (event) {
    if (!event.target.closest("[data-density-toggle]")) {
      return;
    }
    var next = density() === "compact" ? "comfortable" : "compact";
    try {
      window.localStorage.setItem(DENSITY_KEY, next);
    } catch (error) {
      // Storage refused: the choice lasts for this page only.
    }
    document.documentElement.setAttribute("data-density", next);
    showDensity();
  });

  // --- countdowns --------------------------------------------------------------------------------
  // A [data-countdown] holds a time ahead ("in 42 s"); it counts down here between refreshes, and
  // its region refreshes once the moment has passed.
  function span(seconds) {
    seconds = Math.abs(seconds);
    if (seconds < 1) {
      return "<1 s";
    }
    if (seconds < 60) {
      return Math.floor(seconds) + " s";
    }
    if (seconds < 3600) {
      return Math.floor(seconds / 60) + " min";
    }
    if (seconds < 86400) {
      var hours = Math.floor(seconds / 3600);
      var rest = Math.floor(seconds) - hours * 3600;
      return hours < 10 && rest >= 60 ? hours + " h " + Math.floor(rest / 60) + " min" : hours + " h";
    }
    return Math.floor(seconds / 86400) + " d";
  }

  function tickCountdowns() {
    document.querySelectorAll("[data-countdown]").forEach(function (element) {
      var time = element.querySelector("time");
      var at = Date.parse(element.getAttribute("data-countdown"));
      if (!time || isNaN(at) || !time.firstChild || time.firstChild.nodeType !== 3) {
        return;
      }
      var seconds = (at - Date.now()) / 1000;
      time.firstChild.nodeValue = seconds >= 1 ? "in " + span(seconds) : "due now";
      var region = element.closest("[data-poll]");
      if (seconds < 0 && !element.hasAttribute("data-counted-down") && region && window.htmx) {
        element.setAttribute("data-counted-down", "");
        window.htmx.trigger(region, "wake");
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    reveal(document);
    showLiveStatus();
    showDensity();
    if (document.querySelector("[data-countdown]") || document.querySelector("#schedules")) {
      window.setInterval(tickCountdowns, 1000);
    }
    var search = document.querySelector('input[type="search"][name="q"]');
    if (search && window.location.hash === "#search") {
      search.focus();
    }
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    reveal(event.detail.elt.parentNode || document);
    markSelection();
    showLiveStatus();
    showDensity();
  });
})();
