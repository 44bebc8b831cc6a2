#!/usr/bin/env python3
"""The loopback model of the scale bench (docs/bench.md, "One worker, many runs").

An OpenAI-compatible `POST /v1/chat/completions` that answers every request after
DELAY seconds with one JSON body (no streaming): a call of the tool `t` while the
request carries fewer than CALLS tool results, then a final answer. It keeps no state
per run — the request says how far its run is — so any number of runs can share it.

    model.py PORT DELAY CALLS LOG

Each answered request appends "arrival_ms answered_ms peer_port" to LOG (written
when the server gets SIGTERM), from which the bench computes turns/s, the turns in
flight and, per connection (a run keeps its own), the gap between an answer and the
run's next request: what agentrun adds to each turn.
Plain asyncio and byte counting keep its own CPU small next to the worker's.
"""
import asyncio
import json
import signal
import sys
import time

PORT, DELAY, CALLS, LOG = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
times = []


def answer(body: bytes) -> bytes:
    done = body.count(b'"role":"tool"')
    if done < CALLS:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{
                "id": f"call_{done}",
                "type": "function",
                "function": {"name": "t", "arguments": json.dumps({"i": done})},
            }],
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": "done"}
        finish = "stop"
    return json.dumps({
        "id": "bench", "object": "chat.completion", "model": "bench",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }).encode()


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
    peer = writer.get_extra_info("peername")[1]
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            arrived = time.time()
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            await asyncio.sleep(DELAY)
            out = answer(body)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(out), out))
            await writer.drain()
            times.append((arrived, time.time(), peer))
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", PORT, backlog=4096)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    server.close()
    with open(LOG, "w") as f:
        for a, b, peer in times:
            f.write(f"{a * 1000:.1f} {b * 1000:.1f} {peer}\n")


asyncio.run(main())
