#!/bin/sh
# A search that never finds anything.
cat > /dev/null
echo '{"results": []}'
