#!/usr/bin/env python3
"""A before_tool hook in Claude Code's PreToolUse protocol: refunds over 100 are
denied with a reason; order ids are normalised to upper case (updatedInput)."""
import json
import sys

event = json.load(sys.stdin)
args = event["tool_input"]
if args.get("amount", 0) > 100:
    decision = {"permissionDecision": "deny",
                "permissionDecisionReason": "refunds over 100 need a manager; offer at most 100"}
else:
    decision = {"permissionDecision": "allow",
                "updatedInput": {**args, "order_id": args["order_id"].upper()}}
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", **decision}}))
