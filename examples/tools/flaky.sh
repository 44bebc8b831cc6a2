#!/bin/sh
# Fails with exit 75 (temporary failure) on the first two attempts of each call, then
# answers. State lives in $TMPDIR, keyed by run and call, so the example leaves no trace.
cat > /dev/null
state="${TMPDIR:-/tmp}/agentrun-example-flaky-$AGENTRUN_RUN_ID-$AGENTRUN_CALL_ID"
n=$(cat "$state" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "$state"
if [ "$n" -le 2 ]; then
  echo "payment service timed out (attempt $n)" >&2
  exit 75
fi
rm -f "$state"
echo '{"order_id": "ORD-1001", "payment": "captured", "amount": "89.00 EUR"}'
