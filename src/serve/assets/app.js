// agentrun console: the only script. It follows a run page and the queue page with
// server-sent events. Untrusted text (the transcript) is written with textContent,
// never as HTML; the controls and the queue's tables arrive as HTML the server built
// the way it builds every page (each stored value escaped). Forms work without it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  if (!window.EventSource) return;
  followRun(document.querySelector("[data-live]"));
  followQueue(document.querySelector("[data-queue]"));
});

function followRun(run) {
  if (!run) return;
  var pre = document.getElementById("transcript");
  var status = document.getElementById("status");
  var controls = document.getElementById("controls");
  var shown = null; // the controls last written, so a form being filled is left alone
  var source = new EventSource(run.getAttribute("data-live"));
  source.addEventListener("update", function (e) {
    var d = JSON.parse(e.data);
    if (pre) pre.textContent = d.text;
    if (status) status.textContent = d.status;
    // The first update may repeat what the page was drawn with: it is not written
    // over a form someone has started to fill.
    var busy = shown === null && controls && controls.contains(document.activeElement);
    if (controls && d.controls !== shown && !busy) controls.innerHTML = d.controls;
    shown = d.controls;
    if (d.final) {
      source.close();
      document.body.setAttribute("data-run-stopped", d.status);
    }
  });
}

function followQueue(queue) {
  if (!queue) return;
  var last = null;
  var source = new EventSource(queue.getAttribute("data-queue"));
  source.addEventListener("update", function (e) {
    var d = JSON.parse(e.data);
    if (d.html !== last) queue.innerHTML = d.html;
    last = d.html;
  });
}
