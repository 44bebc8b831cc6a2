#!/bin/sh
# Starts the reference MCP server over stdio: the copy .ci/run installs, else one on
# PATH (`npm install -g @modelcontextprotocol/server-everything`), else through npx
# (which downloads it the first time).
here=$(dirname "$0")
installed="$here/../../.mcp-peers/npm/node_modules/.bin/mcp-server-everything"
if [ -x "$installed" ]; then exec "$installed" stdio; fi
if command -v mcp-server-everything >/dev/null 2>&1; then exec mcp-server-everything stdio; fi
exec npx -y @modelcontextprotocol/server-everything stdio
