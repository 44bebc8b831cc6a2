#!/bin/sh
# A service that is down: exit 69 (unavailable) every time.
cat > /dev/null
echo "connection refused by kb.internal:443" >&2
exit 69
