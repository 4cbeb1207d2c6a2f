// Recovery Console: live jobs list (one server-sent event stream), filters, countdowns.
// Served from the package itself; no library, no network access beyond this origin.
"use strict";

(function () {
  function rowsOf(tbody) {
    return Array.prototype.slice.call(tbody.querySelectorAll("tr[data-search]"));
  }

  function value(id) {
    var el = document.getElementById(id);
    return el ? el.value.trim().toLowerCase() : "";
  }

  function applyFilters() {
    var tbody = document.getElementById("job-rows") || document.getElementById("node-rows");
    if (!tbody) return;
    var words = value("search").split(/\s+/).filter(Boolean);
    var cluster = value("f-cluster"), mode = value("f-mode"), live = value("f-live");
    var shown = 0;
    rowsOf(tbody).forEach(function (tr) {
      var text = tr.getAttribute("data-search") || "";
      var ok = words.every(function (w) { return text.indexOf(w) >= 0; });
      if (cluster && (tr.getAttribute("data-cluster") || "").toLowerCase() !== cluster) ok = false;
      if (mode && (tr.getAttribute("data-mode") || "") !== mode) ok = false;
      if (live && (tr.getAttribute("data-live") || "") !== live) ok = false;
      tr.hidden = !ok;
      if (ok) shown += 1;
    });
    var count = document.getElementById("count");
    if (count) count.textContent = String(shown);
  }

  function watchJobs() {
    var tbody = document.getElementById("job-rows");
    // The paged list (`/console/all`) has no stream: it is not live.
    if (!tbody || !tbody.getAttribute("data-stream") || !window.EventSource) return;
    var dot = document.getElementById("live-dot");
    var source = new EventSource(tbody.getAttribute("data-stream"));
    source.addEventListener("open", function () { if (dot) dot.className = "dot on"; });
    source.addEventListener("error", function () { if (dot) dot.className = "dot off"; });
    // The rows arrive rendered and escaped by the server's templates.
    source.addEventListener("jobs", function (e) {
      tbody.innerHTML = e.data;
      applyFilters();
    });
    source.addEventListener("degraded", function (e) {
      var banner = document.getElementById("degraded");
      if (!banner) return;
      banner.textContent = e.data;
      banner.classList.toggle("hidden", !e.data);
    });
  }

  // A live job's page reloads when its row in the jobs stream changes (a new phase, attempt
  // or category), unless the operator is writing in one of its forms.
  function followJob() {
    var job = document.getElementById("live-job");
    if (!job || !window.EventSource) return;
    var workflow = encodeURIComponent(job.getAttribute("data-workflow"));
    var seen = null;
    var source = new EventSource(job.getAttribute("data-stream"));
    source.addEventListener("jobs", function (e) {
      var doc = new DOMParser().parseFromString(
        "<table><tbody>" + e.data + "</tbody></table>", "text/html");
      var row = doc.querySelector("a.job[href*='workflow_id=" + workflow + "']");
      var now = row ? row.closest("tr").textContent : "";
      if (seen !== null && now !== seen && !busy()) {
        source.close();
        keepFlash();
        window.location.reload();
      }
      seen = now;
    });
  }

  // The server shows a flash once; a live reload right after the operator's own action (the
  // job's row changing because of it) would swallow the confirmation, so it is carried over.
  function keepFlash() {
    var flash = document.getElementById("flash");
    if (!flash || !window.sessionStorage) return;
    sessionStorage.setItem("resurgo-flash", JSON.stringify({
      ok: flash.classList.contains("ok"), text: flash.textContent, path: location.pathname }));
  }

  function restoreFlash() {
    if (!window.sessionStorage) return;
    var kept = sessionStorage.getItem("resurgo-flash");
    sessionStorage.removeItem("resurgo-flash");
    var main = document.querySelector("main");
    if (!kept || !main || document.getElementById("flash")) return;
    try { kept = JSON.parse(kept); } catch (e) { return; }
    if (!kept || kept.path !== location.pathname || typeof kept.text !== "string") return;
    var div = document.createElement("div");
    div.className = "flash " + (kept.ok ? "ok" : "bad");
    div.id = "flash";
    div.textContent = kept.text;  // text only: never parsed as markup
    main.insertBefore(div, main.firstChild);
  }

  // An open form box (the mode change) counts as writing: the operator opened it to use it.
  function busy() {
    if (document.querySelector("details[open] form")) return true;
    var active = document.activeElement;
    if (active && (active.tagName === "INPUT" || active.tagName === "SELECT")) return true;
    return Array.prototype.some.call(
      document.querySelectorAll("form input[type=text]"), function (i) { return i.value; });
  }

  function tickCountdowns() {
    var now = Date.now();
    document.querySelectorAll(".countdown[data-expires]").forEach(function (el) {
      var left = Math.round((Date.parse(el.getAttribute("data-expires")) - now) / 1000);
      if (isNaN(left)) return;
      if (left <= 0) {
        el.textContent = "expired: nothing will be done (fail-open)";
        el.classList.add("expired");
        return;
      }
      var m = Math.floor(left / 60), s = left % 60;
      el.textContent = "fails open in " + (m ? m + "m " : "") + s + "s";
      el.classList.toggle("soon", left < 120);
    });
  }

  function guardRejects() {
    document.querySelectorAll("form.decide").forEach(function (form) {
      form.addEventListener("submit", function (e) {
        var button = e.submitter;
        var reason = form.querySelector("input[name=reason]");
        if (button && button.value === "reject" && reason && !reason.value.trim()) {
          e.preventDefault();
          reason.focus();
          reason.classList.add("missing");
        }
      });
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    ["search", "f-cluster", "f-mode", "f-live"].forEach(function (id) {
      var el = document.getElementById(id);
      if (el) el.addEventListener("input", applyFilters);
    });
    restoreFlash();
    applyFilters();
    watchJobs();
    followJob();
    guardRejects();
    tickCountdowns();
    setInterval(tickCountdowns, 1000);
  });
})();
