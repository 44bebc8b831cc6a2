#!/usr/bin/env python3
"""A scorer for `agentrun eval`: reads the run's JSON (`runs show --json`) on stdin and
prints a score from 0 to 1 — here, the share of what a good refund reply mentions."""
import json
import sys

run = json.load(sys.stdin)
answer = (run.get("answer") or "").lower()
wanted = ["ord-1001", "30 days", "refund", "payment method"]
print(sum(w in answer for w in wanted) / len(wanted))
