#!/bin/sh
# A stand-in knowledge base: the arguments arrive as JSON on stdin.
q=$(cat)
case "$q" in
  *refund*) echo '{"policy": "Refunds within 30 days of delivery", "source": "kb/refunds.md"}' ;;
  *ship*) echo '{"policy": "Free shipping over 50 euros", "source": "kb/shipping.md"}' ;;
  *) echo '{"error": "not_found", "message": "no policy matches"}' ;;
esac
