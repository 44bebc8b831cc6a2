#!/usr/bin/env python3
"""Search the demo knowledge base (tools/data/kb.json) for articles matching `q`.

Set KB_OUTAGE=1 in the environment to simulate the service being down (exit 69,
unavailable), which agentrun retries and then hands to the fallback tool. Set
KB_SLOW=SECONDS to make it answer that much later (to kill a run in the middle of it).
"""
import json
import os
import sys
import time

args = json.load(sys.stdin)
time.sleep(float(os.environ.get("KB_SLOW") or 0))
if os.environ.get("KB_OUTAGE") == "1":
    print("knowledge base is unavailable", file=sys.stderr)
    sys.exit(69)
words = [w for w in str(args.get("q", "")).lower().split() if len(w) > 2]
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "data", "kb.json")) as f:
    articles = json.load(f)
hits = [a for a in articles if any(w in (a["title"] + " " + a["body"]).lower() for w in words)]
print(json.dumps({"query": args.get("q"), "articles": hits[:3]}))
