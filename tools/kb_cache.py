#!/usr/bin/env python3
"""Answer from last night's export of the knowledge base (may be stale)."""
import json
import os
import sys

args = json.load(sys.stdin)
words = [w for w in str(args.get("query", "")).lower().split() if len(w) > 2]
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "data", "kb.json")) as f:
    articles = json.load(f)
hits = [a["title"] + ": " + a["body"] for a in articles if any(w in a["body"].lower() for w in words)]
print(json.dumps({"exported": "last night", "snippets": hits[:3]}))
