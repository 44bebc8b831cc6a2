#!/usr/bin/env bash
# The queue bench (issue 17; docs/bench.md "Queue and workers"). Not part of `cargo test`.
#
#   benches/queue/run.sh [RUNS] [STEPS] [WORKERS...]     # defaults: 1000 10 "1 2 4"
#
# For each backend (SQLite; PostgreSQL when AGENTRUN_TEST_PG names a server, e.g. from
# `eval "$(.ci/pg start)"`) and each worker count: submit RUNS runs of STEPS tool steps
# (a 50 ms command tool, not idempotent, on_unknown = "tell_model") plus a final
# answer, start that many `agentrun worker --concurrency 16 --until-idle` processes,
# and time the drain. Then once more with 2 workers while one worker is killed with -9
# every KILL_EVERY seconds (and replaced). Every tool call appends
# "run call start_ms end_ms" to a log; from it and the database it reports runs/s,
# p50/p99 step latency (gap between a run's consecutive tool starts: model turn +
# journal + tool + step commit), commits/s, and checks: every run completed, no
# (run, call) effect twice, no step lost (every run has STEPS+1 steps).
# "step max" in a kill case is the longest pause of any run: the takeover time after a
# worker died (TTL silence + one poll + the resumed step). ONLY_KILL=1 runs only those.
# BIN defaults to the debug build (cargo build); set BIN=target/release/agentrun.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${1:-1000}; STEPS=${2:-10}; shift 2 || true
WORKERS=("${@:-1 2 4}"); [ $# -eq 0 ] && WORKERS=(1 2 4)
KILL_EVERY=${KILL_EVERY:-3}
BIN=${BIN:-$PWD/target/debug/agentrun}
TTL=${TTL:-2s}
OUT=${OUT:-$PWD/target/queue-bench.md}
work=$(mktemp -d "$PWD/target/queue-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Tools get only the environment they declare, so the log's folder is written in.
cat > "$work/tool.sh" <<T
#!/bin/sh
cat > /dev/null
s=\$(date +%s%3N); sleep 0.05; e=\$(date +%s%3N)
echo "\$AGENTRUN_RUN_ID \$AGENTRUN_CALL_ID \$s \$e" >> "$work/\$(cat $work/current)"
echo '"ok"'
T
cat > "$work/tools.toml" <<T
[tools.work]
description = "work"
input_schema = { type = "object" }
command = ["sh", "$work/tool.sh"]
on_unknown = "tell_model"
T
python3 - "$STEPS" > "$work/script.json" <<'P'
import json, sys
n = int(sys.argv[1])
turns = [{"tool_calls": [{"name": "work", "args": {"i": i}}], "usage": {"input": 10, "output": 2}} for i in range(n)]
turns.append({"text": "done", "usage": {"input": 10, "output": 2}})
print(json.dumps({"turns": turns}))
P
printf '+++\nmodel = "script:script.json"\nmax_steps = %d\n+++\nWork.\n' $((STEPS + 5)) > "$work/task.md"

fresh_db() { # $1 backend, $2 label
  if [ "$1" = sqlite ]; then echo "$work/$2.db"; else
    local s="b_$2_$$"; psql "$AGENTRUN_TEST_PG" -qc "SET client_min_messages = warning; DROP SCHEMA IF EXISTS $s CASCADE; CREATE SCHEMA $s" >/dev/null
    echo "$AGENTRUN_TEST_PG?options=-c%20search_path%3D$s"; fi
}

run_case() { # backend workers kill
  local backend=$1 nw=$2 kill=$3 label="$1_w$2_k$3"
  local db; db=$(fresh_db "$backend" "$label")
  export AGENTRUN_DB="$db" EFFECTS="$work/$label.effects"
  : > "$EFFECTS"; echo "$label.effects" > "$work/current"
  (cd "$work" && seq "$RUNS" | xargs -P 4 -I{} "$BIN" submit task.md --tools tools.toml -q >/dev/null)
  local t0; t0=$(date +%s.%N)
  local pids=() kills=0
  for i in $(seq "$nw"); do
    (cd "$work" && exec "$BIN" worker --concurrency 16 --until-idle --lease-ttl "$TTL" --poll 100ms -q) & pids+=($!)
  done
  if [ "$kill" = 1 ]; then
    while :; do
      sleep "$KILL_EVERY"
      local alive=(); for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
      [ ${#alive[@]} -lt "$nw" ] && [ ${#alive[@]} -eq 0 ] && break
      # Stop killing once the queue is drained (workers exit on their own).
      local left; left=$("$BIN" runs list --status queued --status running --json -q | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')
      [ "$left" = 0 ] && break
      kill -9 "${alive[0]}" 2>/dev/null && kills=$((kills + 1))
      pids=("${alive[@]:1}")
      (cd "$work" && exec "$BIN" worker --concurrency 16 --until-idle --lease-ttl "$TTL" --poll 100ms -q) & pids+=($!)
    done
  fi
  wait "${pids[@]}" 2>/dev/null || true
  local t1; t1=$(date +%s.%N)
  "$BIN" runs list --json -q > "$work/$label.runs.json"
  python3 - "$label" "$t0" "$t1" "$EFFECTS" "$work/$label.runs.json" "$RUNS" "$STEPS" "$kills" <<'P' | tee -a "$OUT"
import json, sys, statistics as st, collections
label, t0, t1, eff, runs_path, n, steps, kills = sys.argv[1:]
wall = float(t1) - float(t0); n = int(n); steps = int(steps)
runs = json.load(open(runs_path))
done = sum(1 for r in runs if r["status"] == "completed")
full = sum(1 for r in runs if r["status"] == "completed" and r["steps"] == steps + 1)
calls = collections.Counter(); starts = collections.defaultdict(list)
for line in open(eff):
    run, call, s, e = line.split()
    calls[(run, call)] += 1; starts[run].append(int(s))
dups = sum(c - 1 for c in calls.values() if c > 1)
gaps = []
for v in starts.values():
    v.sort(); gaps += [b - a for a, b in zip(v, v[1:])]
gaps.sort()
q = lambda p: gaps[min(len(gaps) - 1, int(p * len(gaps)))] if gaps else 0
commits = sum(r["steps"] for r in runs)
print(f"| {label} | {n} | {wall:.1f} | {done/wall:.1f} | {q(0.5)} | {q(0.99)} | {gaps[-1] if gaps else 0} | {commits/wall:.0f} | {done}/{n} | {full} | {sum(calls.values())} | {dups} | {kills} |")
P
}

echo "| case | runs | wall s | runs/s | step p50 ms | step p99 ms | step max ms | step commits/s | completed | all steps | effects | dup effects | kills |" | tee "$OUT"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|" | tee -a "$OUT"
backends=(sqlite); [ -n "${AGENTRUN_TEST_PG:-}" ] && backends+=(pg)
for b in "${backends[@]}"; do
  [ -z "${ONLY_KILL:-}" ] && for w in "${WORKERS[@]}"; do run_case "$b" "$w" 0; done
  run_case "$b" 2 1
done
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores" | tee -a "$OUT"
