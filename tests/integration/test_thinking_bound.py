"""Thinking on a model that binds each block to its prefix (the fake refuses, as the real API does, a block whose
system, tools or earlier messages changed: "The block is bound to a different conversation"), through real workers
and the real SDK, where Baton itself changes what came before a kept block: a long thinking run whose old results the
context budget elides, and a chat turn whose agent is upgraded (new instructions) between two of its steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from tests.conftest import Stack
from tests.support import counting_tools
from tests.support.agents_bound_v2 import BOUND_V2
from tests.support.fake_anthropic import Fault, Script, failing, text, thought, tool_call
from tests.support.fake_anthropic_sse import BINDING_BETA

pytestmark = pytest.mark.integration

V1 = {"BATON_AGENTS": "tests.support.agents_bound:AGENTS"}
V2 = {"BATON_AGENTS": "tests.support.agents_bound_v2:AGENTS"}
DROP = {"prefix_mismatch_behavior": "drop_block"}


def _drops(body: dict) -> bool:
    return (body.get("thinking") or {}).get("block_binding") == DROP


def _thinking_first(body: dict) -> bool:
    """The tool loop's last assistant message comes back starting with its thinking (the API requires it)."""
    last = [m for m in body["messages"] if m["role"] == "assistant"][-1]
    return last["content"][0]["type"] == "thinking"


def test_a_long_thinking_run_under_a_small_context_budget_completes(stack: Stack, tmp_path: Path):
    """Twenty thinking steps reading 4,000-character files under BATON_CONTEXT_TOKENS=8000: old results are elided
    mid-loop, which changes the prefix of every kept thinking block after them. No request is refused: each sends its
    loop's last thinking back (asking the API to drop the stale blocks, with the beta, where the loop needs one back),
    and the run completes."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(20):
        (ws / f"f{i}.txt").write_text(f"file {i}\n" + "abcdefghij" * 400)
    reads = [thought(f"Read file {i} next.", tool_call("read_file", {"path": f"f{i}.txt"}, id=f"toolu_r{i}"))
             for i in range(20)]  # fmt: skip
    stack.fake_api.set_handler(Script([*reads, thought("All read.", text("read them all"))]))
    env = {**V1, "BATON_CONTEXT_TOKENS": "8000"}
    stack.worker(**env)
    client = stack.client(**env)
    status = client.wait(client.start_run("read twenty files", workspace=ws), timeout=120)
    assert (status.status, status.reply) == ("completed", "read them all"), status
    requests = stack.fake_api.requests
    assert stack.fake_api.rejections == [] and len(requests) == 21
    assert any("Old tool result elided" in json.dumps(body) for body in requests)
    assert any(_drops(body) for body in requests), "an elision mid-loop made a kept block stale"
    assert all(_thinking_first(body) for body in requests[1:])


def test_an_agent_upgraded_mid_turn_with_thinking_on_completes(stack: Stack):
    """A thinking step's write starts on a v1 worker, which drains; a v2 worker (new instructions, `upgrade=True`)
    takes the turn over: its next request has the new system prompt, so every thinking block before is stale, the
    tool loop's last one included. It asks the API to drop them (the beta) rather than send what would be refused,
    and the turn completes with the write run once."""
    fake = stack.fake_api
    fake.set_handler(Script([
        thought("Write it first.", tool_call("blocking_write", {"note": "u"})),
        failing(Fault(kind="stall", seconds=60, after_events=2), like=text("slow")),
        thought("Now look it up.", tool_call("lookup", {"key": "u"})),
        thought("Done thinking.", text("Upgraded and done.")),
    ]))  # fmt: skip
    worker_a = stack.worker("a", concurrency=1, **V1)
    client = stack.client(**V1)
    ref = client.send_message("bound-up", "write u")
    r = redis.Redis.from_url(stack.redis_server.url)
    assert r.blpop([counting_tools.STARTED_KEY], timeout=30) is not None
    worker_a.terminate()
    r.rpush(counting_tools.RELEASE_KEY, "go")
    assert worker_a.wait_exit(timeout=20) == 0
    stack.worker("b", **V2)
    result = client.wait(ref, timeout=60)
    assert (result.status, result.reply) == ("completed", "Upgraded and done."), result
    assert counting_tools.calls(r, "blocking_write") == 1
    assert fake.rejections == []
    upgraded = [body for body in fake.requests if BOUND_V2 in json.dumps(body.get("system"))]
    assert upgraded and all(_drops(body) and _thinking_first(body) for body in upgraded)
    assert BINDING_BETA  # the fake refuses block_binding without the beta header: no rejection means it was sent
