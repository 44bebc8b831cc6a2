// agentrun console: the only script. It follows a live run with server-sent events
// and writes what arrives with textContent (never as HTML). Forms work without it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var pre = document.querySelector("[data-live]");
  if (!pre || !window.EventSource) return;
  var status = document.getElementById("status");
  var source = new EventSource(pre.getAttribute("data-live"));
  source.addEventListener("update", function (e) {
    var d = JSON.parse(e.data);
    pre.textContent = d.text;
    if (status) status.textContent = d.status;
    if (!d.live) {
      source.close();
      document.body.setAttribute("data-run-stopped", d.status);
    }
  });
});
