#!/usr/bin/env bash
# The peers, on this machine, for `cargo bench` to print next to agentrun (issue 14).
#
# Installs LangGraph + its SQLite checkpointer and DBOS into a throwaway virtualenv
# (under target/, removed at the end unless KEEP_VENV=1), runs the same workload as
# the bench (benches/peers/peers.py says what it is) and writes target/peers.json,
# which the next `cargo bench --bench agentrun_bench` reads. Not part of `cargo test`.
#
#   benches/peers/run.sh            # N = 100 and 1000
#   STEPS="100" benches/peers/run.sh
#   VENV=target/peers-venv benches/peers/run.sh   # keep (and reuse) the virtualenv, so
#                                                 # a later run measures without installing
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="$root/target"
work="$(mktemp -d "$target/peers-XXXXXX")"
venv="${VENV:-$work/venv}"
STEPS="${STEPS:-100 1000}"
trap '[ "${KEEP_VENV:-0}" = 1 ] || rm -rf "$work"' EXIT

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    langgraph langgraph-checkpoint-sqlite dbos >&2
fi
py="$venv/bin/python"
ver() { "$venv/bin/pip" show "$1" 2>/dev/null | awk '/^Version:/ {print $2}'; }
div() { printf '%.4f' "$(echo "$1 / $2" | bc -l)"; }
now_ms() { date +%s%3N; }
size() { local s=0 f; for f in "$1" "$1-wal"; do [ -f "$f" ] && s=$((s + $(stat -c %s "$f"))); done; echo "$s"; }

load="$(cut -d' ' -f1 /proc/loadavg)"
json="{\"load\": \"$load\", \"peers\": {"
first=1
for peer in langgraph dbos; do
  per_step="" bytes=0 last=0
  for n in $STEPS; do
    db="$work/$peer-$n.db"
    ms="$("$py" "$here/peers.py" run "$peer" "$db" "$n" | sed -n 's/.*"ms": \([0-9.]*\).*/\1/p')"
    echo "peers: $peer $n steps: $ms ms" >&2
    per_step="$per_step${per_step:+, }\"$n\": $(div "$ms" "$n")"
    bytes="$(div "$(size "$db")" "$n")"
    last="$n"
  done
  # Resume of the last (largest) run: a new process, one more step.
  db="$work/$peer-resume.db"
  if [ "$peer" = langgraph ]; then
    "$py" "$here/peers.py" run "$peer" "$db" "$last" >/dev/null
  else
    "$py" "$here/peers.py" kill "$peer" "$db" "$last" || true
  fi
  t0="$(now_ms)"; "$py" "$here/peers.py" resume "$peer" "$db" "$last"; t1="$(now_ms)"
  t2="$(now_ms)"; "$py" "$here/peers.py" noop "$peer" "$work/$peer-noop.db"; t3="$(now_ms)"
  echo "peers: $peer resume of $last steps $((t1 - t0)) ms, cold start $((t3 - t2)) ms" >&2
  version="$(ver "$peer")"
  [ "$peer" = langgraph ] && version="$version, langgraph-checkpoint-sqlite $(ver langgraph-checkpoint-sqlite)"
  [ $first = 1 ] || json="$json, "
  first=0
  json="$json\"$peer\": {\"version\": \"$version\", \
\"per_step_ms\": {$per_step}, \"bytes_per_step\": $bytes, \
\"resume_ms\": $((t1 - t0)), \"resume_steps\": $last, \"cold_start_ms\": $((t3 - t2))}"
done
json="$json}}"
echo "$json" > "$target/peers.json"
echo "peers: written to $target/peers.json" >&2
cat "$target/peers.json"
