"""The naive loop (`bench.naive_app`) with what a careful user adds so that a crash loses no work, pays for no model
call twice and runs no tool twice, and nothing else: the floor under any durable loop's cost on this machine.

- A per-chat lock (`SET NX PX`): two copies of one message (a redelivery) never run a chat at once.
- The model's answer that calls tools, and the tools' results, appended to the turn's journal before the loop goes
  on: a rerun after a crash replays them instead of asking the model or running a tool again.
- The turn's messages, the journal's removal and the lock's release in one `MULTI` at the end, which also journals
  the last answer (nothing runs after it).

So four round trips of the child's own a turn of one tool round (the naive loop: two), and the same streaming SDK
loop. No stop, drain, events, live text, budgets, rate limits, approvals or turn records: what Baton does beyond
this is those features. Started as `NAIVE_APP=bench.safe_naive_app` (`bench.naive_loop.naive_beside`), its task
named as the naive loop's, on a queue of its own.
"""

from __future__ import annotations

import json
import os
from typing import Any

import anthropic
from celery import Celery, Task

from bench.naive_app import TOOLS, URL, peek, store

app = Celery("safe-naive", broker=URL, backend=URL)
app.conf.update(task_serializer="json", accept_content=["json"], result_serializer="json", worker_prefetch_multiplier=1)
LOCK_MS = 10 * 60 * 1000  # longer than a turn: a lock a crash left behind frees itself
_client: anthropic.Anthropic | None = None


def ask(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's answer to `messages`, streamed with the SDK's helper as the naive loop does."""
    global _client
    _client = _client or anthropic.Anthropic(max_retries=2)  # cached per process, built after fork
    request: dict[str, Any] = {"model": os.environ.get("BATON_MODEL", "claude-bench"), "max_tokens": 1024,
                               "messages": messages, "tools": TOOLS}
    with _client.messages.stream(**request) as stream:
        reply = stream.get_final_message()
    return {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]}


@app.task(name="naive.turn", bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None)
def turn(self: Task, chat_id: str, text: str) -> str:
    """One chat turn, resumable: history and journal read with the lock, each step journaled before the next."""
    me, lock, journal = self.request.id, f"safe:{chat_id}:lock", f"safe:{chat_id}:journal:{self.request.id}"
    pipe = store.pipeline(transaction=False)
    pipe.set(lock, me, nx=True, px=LOCK_MS)
    pipe.lrange(f"safe:{chat_id}", 0, -1)
    pipe.lrange(journal, 0, -1)
    locked, stored, journaled = pipe.execute()
    if not locked and store.get(lock) != me.encode():  # another message of this chat is running: after it
        raise self.retry(countdown=0.05)
    history = [json.loads(m) for m in stored]
    replay = [json.loads(m) for m in journaled]  # what a run of this message before a crash already did
    messages: list[dict[str, Any]] = [*history, {"role": "user", "content": text}]
    while True:
        fresh = not replay
        answer = ask(messages) if fresh else replay.pop(0)
        messages.append(answer)
        calls = [b for b in answer["content"] if b["type"] == "tool_use"]
        if not calls:
            break
        if fresh:
            store.rpush(journal, json.dumps(answer))  # before its tools run: a rerun does not ask again
        if replay:
            results = replay.pop(0)
        else:
            results = {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": c["id"], "content": peek(**c["input"])} for c in calls]}
            store.rpush(journal, json.dumps(results))  # before the next call: a rerun does not run them again
        messages.append(results)
    pipe = store.pipeline(transaction=True)
    pipe.rpush(f"safe:{chat_id}", *[json.dumps(m) for m in messages[len(history):]])
    pipe.delete(journal, lock)
    pipe.execute()
    return "".join(b["text"] for b in answer["content"] if b["type"] == "text")
