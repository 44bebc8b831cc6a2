#!/usr/bin/env python3
"""The `send_reply` command tool from tools.toml: a stand-in that "sends" by appending
the reply to outbox.jsonl. agentrun asks a person to approve each call first.

AGENTRUN_CALL_ID is stable across retries and resumes: a real sender would pass it as
an idempotency key so a reply is never sent twice.
"""
import json
import os
import sys

args = json.load(sys.stdin)
record = {"call_id": os.environ.get("AGENTRUN_CALL_ID"), "to": args["to"], "body": args["body"]}
with open("outbox.jsonl", "a") as f:
    f.write(json.dumps(record) + "\n")
print(json.dumps({"sent": True, "to": args["to"]}))
