#!/usr/bin/env python3
"""The `search_notes` command tool from tools.toml: search the team's notes.

agentrun sends the call's arguments as one JSON object on stdin and reads the result
from stdout. To report a failure, print {"error": KIND, "message": ...} and exit with
a sysexits code: 65 bad arguments, 66 nothing found, 75 try again later.
"""
import json
import sys

NOTES = [
    {"title": "Returns", "body": "Customers can return any item within 30 days of delivery for a full refund."},
    {"title": "Refunds", "body": "Refunds for returns go back to the original payment method within 5 business days."},
    {"title": "Shipping", "body": "Standard shipping takes 3 to 5 business days; express takes 1 to 2."},
    {"title": "Warranty", "body": "Electronics carry a two-year warranty from the date of delivery."},
]

args = json.load(sys.stdin)
query = str(args.get("query", "")).strip().lower()
if not query:
    print(json.dumps({"error": "invalid_arguments", "message": "`query` is empty"}))
    sys.exit(65)
words = [w for w in query.split() if len(w) > 2] or [query]
hits = [n for n in NOTES if any(w in (n["title"] + " " + n["body"]).lower() for w in words)]
if not hits:
    print(json.dumps({"error": "not_found", "message": "no note mentions " + repr(query)}))
    sys.exit(66)
print(json.dumps({"notes": hits[:3]}))
