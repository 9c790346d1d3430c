"""Infrastructure that is down, seen from the entry points: the CLI names what it could not reach and exits 1,
the HTTP API answers 503, and a turn the broker could not take fails as retryable instead of waiting forever.

Real `baton` processes, a real redis-server (the store), a real worker; "down" is a port nothing listens on.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.fake_anthropic import Script, text
from tests.support.ports import free_port
from tests.support.processes import REPO

pytestmark = pytest.mark.integration


def _baton(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tasks.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


def test_the_cli_names_the_store_it_cannot_reach_and_exits_1(stack):
    """With the store down, every command prints one line naming the store and its address (password masked),
    no traceback, and exits 1; `--json` prints the same as one object."""
    port = free_port()
    env = {**stack.env, "BATON_REDIS_URL": f"redis://:hunter2@127.0.0.1:{port}/0"}
    for args in (["send", "c1", "hello"], ["status", "r1"], ["transcript", "c1"], ["stop", "c1"]):
        out = _baton(env, *args)
        assert out.returncode == 1, (args, out.stderr)
        assert out.stderr.startswith(f"baton: cannot reach the store (Redis) at redis://:**@127.0.0.1:{port}/0: "), (
            out.stderr
        )
        assert "Traceback" not in out.stderr and "hunter2" not in out.stderr + out.stdout
        assert len(out.stderr.strip().splitlines()) == 1
    out = _baton(env, "send", "c1", "hello", "--json")
    assert out.returncode == 1
    assert json.loads(out.stdout)["unavailable"] == "store"


def test_a_turn_the_broker_could_not_take_fails_retryable_and_a_retry_completes_it(stack):
    """The store is up, the broker down: `baton send` exits 1 naming the broker; the turn it recorded is failed
    (infra_transient, retryable) and out of the chat's queue, so nothing waits behind it; once the broker is back,
    `baton retry` runs it once and the chat goes on. A coding run the broker could not take: the same."""
    stack.fake_api.set_handler(Script([text("made it"), text("and on"), text("ran")]))
    port = free_port()
    down = {**stack.env, "BATON_BROKER_URL": f"redis://:hunter2@127.0.0.1:{port}/0"}
    out = _baton(down, "send", "c1", "hello")
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith(f"baton: cannot reach the broker (Redis) at redis://:**@127.0.0.1:{port}/0: ")
    assert "failed, retryable (baton retry c1)" in out.stderr and "hunter2" not in out.stderr

    client = stack.client()
    [event] = [e for e in client.events("c1") if e.type == "turn.failed"]
    turn = client.turn("c1", event.model_dump()["turn_id"])
    assert turn.status == "failed" and turn.failure is not None
    assert (turn.failure["class"], turn.failure["retryable"]) == ("infra_transient", True)
    assert client.redis.llen("baton:{chat:c1}:queue") == 0
    assert stack.fake_api.request_count == 0

    stack.worker()
    out = _baton(stack.env, "retry", "c1", "--wait", "--json", "--timeout", "60")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["reply"] == "made it"
    assert client.wait(client.send_message("c1", "next"), timeout=60).reply == "and on"

    out = _baton(down, "run", "say hello", "--workspace", str(stack.tmp_path), "--run-id", "r1")
    assert out.returncode == 1 and "run r1 was not started; it is failed, retryable (baton retry r1)" in out.stderr
    assert client.run_status("r1").status == "failed"
    out = _baton(stack.env, "retry", "r1", "--wait", "--json", "--timeout", "60")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["reply"] == "ran"
    assert stack.fake_api.request_count == 3


def test_the_api_answers_503_naming_what_is_down(stack, serve):
    """POST a message with the broker down: 503 naming the broker (and the turn is failed, not stuck); with the
    store down: 503 naming the store, and a live stream closes saying why. The address stays in the server's log,
    not in the answer."""
    api = serve(BATON_BROKER_URL=f"redis://127.0.0.1:{free_port()}/0")
    status, body = api.post("/api/chats/c1/messages", {"text": "hello"})
    assert (status, body) == (503, {"detail": "the broker (Redis) is unavailable; try again"})
    [turn_id] = stack.client().redis.lrange("baton:{chat:c1}:turns", 0, -1)
    assert stack.client().turn("c1", turn_id.decode()).status == "failed"

    api = serve()
    stack.redis_server.stop()
    for path, call in (("/api/chats/c1/messages", api.post), ("/api/chats/c1/transcript", None)):
        status, body = call(path, {"text": "hello"}) if call else api.get(path)
        assert (status, body) == (503, {"detail": "the store (Redis) is unavailable; try again"}), path
    with api.stream("/api/chats/c1/stream") as s:  # opened (a browser would retry), then closed, saying why
        assert list(s.events()) == ["open", "the store (Redis) is unavailable; reconnect with Last-Event-ID"]


def test_a_worker_without_provider_credentials_warns_at_start_and_fails_turns_as_provider_auth_billing_nothing(stack):
    """BATON_PROVIDER=anthropic and no key: the worker says so at start; a turn fails as provider_auth with a
    sentence naming ANTHROPIC_API_KEY, no attempt made or counted, and the provider never asked."""
    worker = stack.worker(ANTHROPIC_API_KEY="")
    assert "provider: BATON_PROVIDER=anthropic, but no Anthropic credentials are configured: set ANTHROPIC_API_KEY" in (
        worker.log()
    )
    client = stack.client()
    result = client.wait(client.send_message("c1", "hello"), timeout=60)
    assert result.status == "failed" and result.failure is not None
    assert result.failure["class"] == "provider_auth" and result.failure["retryable"] is False
    assert "ANTHROPIC_API_KEY" in result.failure["message"]
    assert (result.usage.attempts, result.usage.discarded_attempts) == (0, 0)
    assert stack.fake_api.request_count == 0
