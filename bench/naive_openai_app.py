"""`bench.naive_app`'s loop written for the `openai` SDK: one `acks_late` Celery task looping Chat Completions.

The OpenAI edge's baseline in `bench.providers`, as plain as a first version would be: the chat's history in a
Redis list (in the API's own message shape), the SDK client built once per worker process with its default
retries, no journal, lease, events or repair. It streams, as Baton streams every answer (live text): by default
`chat.completions.create(stream=True)` with the chunks folded by hand (text, tool calls by index), the cheapest
streaming loop; with NAIVE_HELPER=1 the SDK's `chat.completions.stream` helper, which parses every chunk into
its models and costs about 6 ms more per call on the fake. Started as its own worker
(`celery -A bench.naive_openai_app worker`) against the Redis given in `NAIVE_REDIS_URL`; OPENAI_BASE_URL and
OPENAI_API_KEY point the SDK at the fake.
"""

from __future__ import annotations

import json
import os
from typing import Any

import openai
import redis
from celery import Celery

URL = os.environ.get("NAIVE_REDIS_URL", "redis://127.0.0.1:6379/15")
app = Celery("naive-openai", broker=URL, backend=URL)
app.conf.update(task_serializer="json", accept_content=["json"], result_serializer="json", worker_prefetch_multiplier=1)
store = redis.Redis.from_url(URL)
TOOLS = [{"type": "function", "function": {
    "name": "peek", "description": "Return a fixed value for a key.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}]
_client: openai.OpenAI | None = None
HELPER = os.environ.get("NAIVE_HELPER") == "1"


def peek(key: str) -> str:
    """The same no-I/O tool Baton's side of the benchmark runs."""
    return f"value-of-{key}"


def ask(client: openai.OpenAI, request: dict[str, Any]) -> dict[str, Any]:
    """One streamed answer as the assistant message to keep (`content`, `tool_calls`)."""
    if HELPER:
        with client.chat.completions.stream(**request) as stream:
            message = stream.get_final_completion().choices[0].message
        return message.model_dump(include={"role", "content", "tool_calls"}, exclude_none=True)
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for chunk in client.chat.completions.create(**request, stream=True):
        for choice in chunk.choices:
            text.append(choice.delta.content or "")
            for piece in choice.delta.tool_calls or []:
                call = calls.setdefault(piece.index, {"id": "", "type": "function",
                                                      "function": {"name": "", "arguments": ""}})
                call["id"] = piece.id or call["id"]
                if piece.function is not None:
                    call["function"]["name"] += piece.function.name or ""
                    call["function"]["arguments"] += piece.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


@app.task(name="naive.turn", acks_late=True, reject_on_worker_lost=True)
def turn(chat_id: str, text: str) -> str:
    """One chat turn: history from Redis, model and tools until it answers, new messages appended."""
    global _client
    _client = _client or openai.OpenAI(max_retries=2)  # cached per process, built after fork
    history = [json.loads(m) for m in store.lrange(f"naive:{chat_id}", 0, -1)]
    messages: list[dict[str, Any]] = [*history, {"role": "user", "content": text}]
    while True:
        request: dict[str, Any] = {"model": os.environ.get("BATON_MODEL", "gpt-bench"), "max_completion_tokens": 1024,
                                   "messages": messages, "tools": TOOLS}
        reply = ask(_client, request)
        messages.append(reply)
        calls = reply.get("tool_calls") or []
        if not calls:
            break
        for call in calls:
            result = peek(**json.loads(call["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    store.rpush(f"naive:{chat_id}", *[json.dumps(m) for m in messages[len(history):]])
    return str(reply.get("content") or "")
