#!/bin/sh
# Last night's export of the knowledge base.
cat > /dev/null
echo '{"snippets": ["Refund window: delivered orders can be returned within 30 days of delivery."], "exported": "last night"}'
