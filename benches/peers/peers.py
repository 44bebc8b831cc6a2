"""The peers' side of the bench (benches/peers/run.sh): the same workload as
agentrun's suite, run by LangGraph + SqliteSaver and by DBOS on SQLite.

Workload: N steps; each step is one scripted "model turn" asking for one tool call
(a different argument every turn), the tool (trivial, returns 1), and the peer's own
durable checkpoint; the transcript grows by two messages per step, as agentrun's does.

    python peers.py run    PEER DB N        -> {"ms": whole run in-process}
    python peers.py resume PEER DB N        -> one more step on the N-step run
    python peers.py kill   PEER DB N        -> (dbos) dies after N of N+1 steps
    python peers.py noop   PEER DB          -> imports and setup only (cold start)
"""

import json
import operator
import os
import sqlite3
import sys
import time
from typing import Annotated, TypedDict


def model_turn(turn):
    return {"role": "assistant", "tool_calls": [{"name": "t", "args": {"i": turn}}]}


def tool(args):
    return 1


# ---- LangGraph + SqliteSaver -------------------------------------------------

def langgraph(db):
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        messages: Annotated[list, operator.add]
        turn: int
        target: int

    def model(s):
        if s["turn"] >= s["target"]:
            return {"messages": [{"role": "assistant", "text": "done"}], "turn": s["turn"]}
        return {"messages": [model_turn(s["turn"])], "turn": s["turn"] + 1}

    def run_tool(s):
        call = s["messages"][-1]["tool_calls"][0]
        return {"messages": [{"role": "tool", "content": tool(call["args"])}]}

    def route(s):
        return "tool" if "tool_calls" in s["messages"][-1] else END

    g = StateGraph(State)
    g.add_node("model", model)
    g.add_node("tool", run_tool)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route)
    g.add_edge("tool", "model")
    conn = sqlite3.connect(db, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    return g.compile(checkpointer=saver)


def lg_config(n):
    return {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * n + 10}


# ---- DBOS on SQLite -----------------------------------------------------------

def dbos(db, die_at=None):
    from dbos import DBOS

    DBOS(config={"name": "peer-bench", "system_database_url": f"sqlite:///{db}",
                  "run_admin_server": False})

    @DBOS.step()
    def model(turn):
        return model_turn(turn)

    @DBOS.step()
    def call_tool(args):
        return tool(args)

    @DBOS.workflow()
    def agent(n):
        messages = []
        for turn in range(n):
            if die_at is not None and turn == die_at:
                os._exit(9)
            r = model(turn)
            messages.append(r)
            messages.append({"role": "tool", "content": call_tool(r["tool_calls"][0]["args"])})
        return len(messages)

    DBOS.launch()
    return DBOS, agent


def main():
    what, peer, db = sys.argv[1], sys.argv[2], sys.argv[3]
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    if peer == "langgraph":
        graph = langgraph(db)
        if what == "run":
            t = time.perf_counter()
            graph.invoke({"messages": [], "turn": 0, "target": n}, lg_config(n))
            print(json.dumps({"ms": (time.perf_counter() - t) * 1e3}))
        elif what == "resume":
            graph.invoke({"target": n + 1}, lg_config(n + 1))
    elif peer == "dbos":
        from dbos import SetWorkflowID
        if what == "kill":
            DBOS, agent = dbos(db, die_at=n)
            with SetWorkflowID("bench"):
                agent(n + 1)
        elif what == "resume":
            # Launching recovers the pending workflow: its n recorded steps are
            # replayed from the database, the last one runs.
            DBOS, agent = dbos(db)
            DBOS.retrieve_workflow("bench").get_result()
            DBOS.destroy()
        else:
            DBOS, agent = dbos(db)
            if what == "run":
                t = time.perf_counter()
                agent(n)
                print(json.dumps({"ms": (time.perf_counter() - t) * 1e3}))
            DBOS.destroy()
    os._exit(0)


if __name__ == "__main__":
    main()
