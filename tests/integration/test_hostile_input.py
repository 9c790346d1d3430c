"""Hostile and broken input: refused before enqueue, or dead-lettered by a worker that stays healthy."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import uuid

import pytest
import redis
from kombu import Connection, Exchange, Producer
from kombu.exceptions import SerializerNotInstalled

from tasks.client import ValidationError
from tests.support.fake_anthropic import Script, text
from tests.support.processes import REPO

pytestmark = pytest.mark.integration

DEADLETTER = "baton:deadletter"


class _Canary:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def _publish_raw(url: str, queue: str, body: bytes, content_type: str, task: str = "baton.chat_turn") -> str:
    task_id = str(uuid.uuid4())
    headers = {
        "lang": "py",
        "task": task,
        "id": task_id,
        "root_id": task_id,
        "parent_id": None,
        "group": None,
        "argsrepr": "()",
        "kwargsrepr": "{}",
        "origin": "test",
        "retries": 0,
        "eta": None,
        "expires": None,
    }
    with Connection(url) as conn:
        producer = Producer(conn.channel(), exchange=Exchange(queue, type="direct"), routing_key=queue)
        producer.publish(
            body, content_type=content_type, content_encoding="binary", headers=headers, serializer=None, declare=[]
        )
    return task_id


def _next_dead_letter(r: redis.Redis) -> dict:
    popped = r.brpop([DEADLETTER], timeout=30)
    assert popped is not None, "nothing was dead-lettered"
    return json.loads(popped[1])


def test_poison_messages_are_dead_lettered_never_executed_and_the_worker_stays_healthy(stack, tmp_path):
    """A pickle (whose unpickling would create a canary file), malformed JSON, an unknown task name and
    arguments that fail validation are each logged, recorded in baton:deadletter once, never executed or
    redelivered; afterwards the same worker still completes a normal turn."""
    stack.fake_api.set_handler(Script([text("still healthy")]))
    worker = stack.worker()
    r = redis.Redis.from_url(stack.redis_server.url, socket_timeout=None)
    canary = tmp_path / "canary"

    _publish_raw(
        stack.redis_server.url,
        stack.queue,
        pickle.dumps(((_Canary(str(canary)),), {}, {})),
        "application/x-python-serialize",
    )
    entry = _next_dead_letter(r)
    assert "pickle" in entry["reason"] or "untrusted" in entry["reason"].lower() or "refus" in entry["reason"].lower()

    _publish_raw(stack.redis_server.url, stack.queue, b"{not json", "application/json")
    assert "undecodable" in _next_dead_letter(r)["reason"]

    client = stack.client()
    client._celery.send_task("baton.no_such_task", args=[1], queue=stack.queue)
    assert "unknown task" in _next_dead_letter(r)["reason"]

    client._celery.send_task("baton.chat_turn", args=["bad id!", 7], queue=stack.queue)
    assert "validation" in _next_dead_letter(r)["reason"]

    result = client.wait(client.send_message("healthy", "are you there?"), timeout=30)
    assert result.status == "completed" and result.reply == "still healthy"
    assert worker.alive
    assert not canary.exists()
    assert r.llen(DEADLETTER) == 0  # each poison message recorded once, none redelivered
    assert "Refusing to deserialize" in worker.log() or "ContentDisallowed" in worker.log()


def test_the_project_cannot_send_a_pickle(stack):
    """Baton's own Celery configuration has no pickle encoder: trying to send one fails at the sender."""
    client = stack.client()
    with pytest.raises(SerializerNotInstalled):
        client._celery.send_task("baton.chat_turn", args=["c", "t"], queue=stack.queue, serializer="pickle")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c, tmp: c.send_message("chat-1", ""), "empty"),
        (lambda c, tmp: c.send_message("chat-1", "   \n"), "empty"),
        (lambda c, tmp: c.send_message("chat-1", "x" * 100_001), "limit"),
        (lambda c, tmp: c.send_message("chat-1", "bad \udcff bytes"), "UTF-8"),
        (lambda c, tmp: c.send_message("../etc", "hi"), "chat_id"),
        (lambda c, tmp: c.send_message("a" * 200, "hi"), "chat_id"),
        (lambda c, tmp: c.start_run("goal", workspace=tmp / "missing"), "does not exist"),
        (lambda c, tmp: c.start_run("goal", workspace=tmp, run_id="no spaces allowed"), "run_id"),
    ],
)
def test_bad_input_is_refused_before_anything_is_enqueued(scripted_stack, tmp_path, call, message):
    """Each bad input raises a clear ValidationError and leaves the broker queue and the store empty."""
    client = scripted_stack.client()
    with pytest.raises(ValidationError, match=message):
        call(client, tmp_path)
    r = redis.Redis.from_url(scripted_stack.redis_server.url)
    assert r.llen(scripted_stack.queue) == 0
    assert r.keys("baton:*") == []


def test_cli_bad_input_exits_2_with_a_clear_message(scripted_stack, tmp_path):
    """The CLI turns bad input into exit status 2 and a message naming the problem."""
    for argv in (["send", "bad id!", "hi"], ["send", "c1", ""], ["run", "goal", "--workspace", str(tmp_path / "nope")]):
        out = subprocess.run(
            [sys.executable, "-m", "tasks.cli", *argv],
            cwd=REPO,
            env=scripted_stack.env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 2, (argv, out.stdout, out.stderr)
        assert out.stderr.strip()
