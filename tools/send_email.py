#!/usr/bin/env python3
"""Pretend to email a customer: appends the message to .agentrun/outbox.jsonl.

Not idempotent (a resend is a second email), and gated by approval in tools.toml.
"""
import json
import os
import sys

args = json.load(sys.stdin)
if "@" not in str(args.get("to", "")):
    print(f"not an email address: {args.get('to')!r}", file=sys.stderr)
    sys.exit(65)
os.makedirs(".agentrun", exist_ok=True)
with open(os.path.join(".agentrun", "outbox.jsonl"), "a") as f:
    f.write(json.dumps({"call_id": os.environ.get("AGENTRUN_CALL_ID"), **args}) + "\n")
print(json.dumps({"sent": True, "to": args["to"]}))
