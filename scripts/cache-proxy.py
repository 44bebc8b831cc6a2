#!/usr/bin/env python3
"""A proxy in front of llama-server for the prompt-cache check of real-llm-check.sh
(issue 23).

    cache-proxy.py UPSTREAM PORT CALLS LOG

Forwards `POST /v1/chat/completions` to UPSTREAM without streaming, appends the
server's own `timings.cache_n` / `timings.prompt_n` and `usage` of every answer to LOG
(one JSON line each), and — for the first CALLS answers — replaces the model's message
with a call of `get_weather`, so a tiny model that will not call tools still drives a
run of CALLS + 1 steps. The server evaluates every prompt in full either way, so its
timings are what agentrun's requests cost it.
"""
import http.server
import itertools
import json
import sys
import urllib.request

UP, PORT, CALLS, LOG = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
CITIES = ["Paris", "Rome", "Oslo", "Lima", "Kyiv", "Quito", "Hanoi", "Dakar", "Perth",
          "Riga", "Baku", "Doha", "Bern", "Cairo", "Delhi", "Seoul"]
count = itertools.count()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        req["stream"] = False
        req.pop("stream_options", None)
        upstream = urllib.request.Request(UP + self.path, json.dumps(req).encode(),
                                          {"Content-Type": "application/json"})
        resp = json.loads(urllib.request.urlopen(upstream, timeout=600).read())
        i = next(count)
        timings = resp.get("timings", {})
        with open(LOG, "a") as f:
            f.write(json.dumps({"i": i, "cache_n": timings.get("cache_n"),
                                "prompt_n": timings.get("prompt_n"),
                                "usage": resp.get("usage")}) + "\n")
        if i < CALLS:
            args = json.dumps({"city": CITIES[i % len(CITIES)]})
            resp["choices"][0]["message"] = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": "get_weather", "arguments": args}}]}
            resp["choices"][0]["finish_reason"] = "tool_calls"
        out = json.dumps(resp).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
