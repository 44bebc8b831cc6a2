#!/usr/bin/env python3
"""Look up an order in the demo shop's order book (tools/data/orders.json).

Protocol (agentrun command tools): arguments arrive as JSON on stdin; the result is
printed on stdout; the exit code says how it went (66 = not found, 64 = bad input).
"""
import json
import os
import sys

args = json.load(sys.stdin)
order_id = str(args.get("order_id", "")).strip().upper()
if not order_id.startswith("ORD-"):
    print(f"order_id must look like ORD-1234, got {order_id!r}", file=sys.stderr)
    sys.exit(64)
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "data", "orders.json")) as f:
    orders = json.load(f)
order = orders.get(order_id)
if order is None:
    print(f"no order with id {order_id}", file=sys.stderr)
    sys.exit(66)
print(json.dumps({"order_id": order_id, **order}))
