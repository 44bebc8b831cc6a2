#!/bin/sh
# Refunds an order; echoes what it did.
input=$(cat)
printf '{"refunded": %s}\n' "$input"
