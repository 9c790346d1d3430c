"""No secret leaves the worker: the API key never appears in logs, events, transcripts, tasks or results."""

from __future__ import annotations

import json

import pytest
import redis

from tests.conftest import FAKE_KEY, FAKE_OPENAI_KEY, PROVIDERS
from tests.support.fake_anthropic import Fault, Script, failing, text, tool_call

pytestmark = pytest.mark.integration


def _everything_in_redis(r: redis.Redis) -> bytes:
    chunks: list[bytes] = []
    for key in r.scan_iter(count=1000):
        chunks.append(key)
        kind = r.type(key)
        if kind == b"string":
            chunks.append(r.get(key) or b"")
        elif kind == b"list":
            chunks += r.lrange(key, 0, -1)
        elif kind == b"hash":
            for field, value in r.hgetall(key).items():
                chunks += [field, value]
        elif kind == b"set":
            chunks += list(r.smembers(key))
        elif kind == b"zset":
            chunks += r.zrange(key, 0, -1)
        elif kind == b"stream":
            for _id, fields in r.xrange(key):
                chunks += list(fields.values())
    return b"\n".join(chunks)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_the_api_key_appears_nowhere_we_write(stack, tmp_path, provider):
    """With a recognisable fake key, a turn with a tool round and a replayed stream, a failing turn and a
    coding run that prints its environment leave no trace of the key in worker logs (JSON logs on), Redis
    (events, transcripts, records, rounds, task results, the queue) or what the provider was sent."""
    stack.fake_api.set_handler(
        Script(
            [
                tool_call("lookup", {"key": "k"}),
                failing(Fault(kind="drop", after_events=3), like=text("partial")),
                text("done"),
                failing(Fault(kind="http", status=401)),
                tool_call("run_command", {"command": "env"}),
                text("printed the environment"),
            ]
        )
    )
    worker = stack.worker(BATON_LOG_JSON="1")
    client = stack.client()
    assert client.wait(client.send_message("s1", "hello"), timeout=60).status == "completed"
    failed = client.wait(client.send_message("s1", "again"), timeout=60)
    assert failed.status == "failed" and failed.failure["class"] == "provider_auth"
    run = client.wait(client.start_run("show env", workspace=tmp_path), timeout=60)
    assert run.status == "completed"

    stored = _everything_in_redis(redis.Redis.from_url(stack.redis_server.url))
    log = worker.log()
    for key in (FAKE_KEY, FAKE_OPENAI_KEY):  # the worker holds both; the OpenAI stack talks with the second
        assert key.encode() not in stored
        assert key not in log
        assert key not in json.dumps(stack.fake_api.requests)
    env_result = stack.fake_api.requests[-1]["messages"][-1]["content"][0]["content"]
    assert "PATH=" in env_result and "ANTHROPIC_API_KEY" not in env_result and "OPENAI_" not in env_result

    structured = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert any(entry.get("chat_id") == "s1" and entry.get("turn_id") for entry in structured)
    assert any(
        entry.get("failure_class") == "provider_auth" and entry.get("attempt") == 1 and entry.get("chat_id") == "s1"
        for entry in structured
    )
