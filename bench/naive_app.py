"""The loop a user would write without Baton: one `acks_late` Celery task looping the anthropic SDK over tools.

The baseline of `bench.naive_loop`, as plain as a first version in a project would be: the chat's history in
a Redis list, the SDK client built once per worker process, no journal, lease, events or repair, and (unless
NAIVE_STREAM=1) no streaming. Started as
its own worker (`celery -A bench.naive_app worker`) against the Redis given in `NAIVE_REDIS_URL`.
"""

from __future__ import annotations

import json
import os
from typing import Any

import anthropic
import redis
from celery import Celery

URL = os.environ.get("NAIVE_REDIS_URL", "redis://127.0.0.1:6379/15")
app = Celery("naive", broker=URL, backend=URL)
# redis-py 8 caps a pool at 100 connections unless told otherwise: on `-P threads -c 500` (`bench.concurrency`) the
# 101st task at once in `store` or in the result backend failed with MaxConnectionsError (1 of 2 runs at stop 66), as
# a user's would until they sized their pools; sizing them costs a turn nothing.
app.conf.update(task_serializer="json", accept_content=["json"], result_serializer="json", worker_prefetch_multiplier=1,
                redis_max_connections=1024)
store = redis.Redis.from_url(URL, max_connections=1024)
TOOLS = [{"name": "peek", "description": "Return a fixed value for a key.",
          "input_schema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}]
_client: anthropic.Anthropic | None = None
# NAIVE_STREAM=1: the same loop streaming each answer with the SDK's `messages.stream` helper, as a loop that
# shows live text would (the text goes nowhere here, so this side pays for the stream and nothing else).
STREAM = os.environ.get("NAIVE_STREAM") == "1"


def peek(key: str) -> str:
    """The same no-I/O tool Baton's side of the benchmark runs."""
    return f"value-of-{key}"


@app.task(name="naive.turn", acks_late=True, reject_on_worker_lost=True)
def turn(chat_id: str, text: str) -> str:
    """One chat turn: history from Redis, model and tools until it answers, new messages appended."""
    global _client
    _client = _client or anthropic.Anthropic(max_retries=2)  # cached per process, built after fork
    history = [json.loads(m) for m in store.lrange(f"naive:{chat_id}", 0, -1)]
    messages: list[dict[str, Any]] = [*history, {"role": "user", "content": text}]
    while True:
        request: dict[str, Any] = {"model": os.environ.get("BATON_MODEL", "claude-bench"), "max_tokens": 1024,
                                   "messages": messages, "tools": TOOLS}
        if STREAM:
            with _client.messages.stream(**request) as stream:
                reply = stream.get_final_message()
        else:
            reply = _client.messages.create(**request)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]})
        calls = [b for b in reply.content if b.type == "tool_use"]
        if not calls:
            break
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c.id, "content": peek(**c.input)} for c in calls]})
    store.rpush(f"naive:{chat_id}", *[json.dumps(m) for m in messages[len(history):]])
    return "".join(b.text for b in reply.content if b.type == "text")
