#!/bin/sh
# The caller may not do this: exit 77 (permission denied).
cat > /dev/null
echo "the support role may not change another customer's address" >&2
exit 77
