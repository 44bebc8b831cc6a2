#!/bin/sh
# Looks up an order; echoes the arguments it got.
input=$(cat)
printf '{"found": true, "query": %s, "status": "delivered", "delivered": "2026-11-16"}\n' "$input"
