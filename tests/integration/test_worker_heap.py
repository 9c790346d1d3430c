"""A worker keeps its long-lived heap out of the garbage collector's full passes (tasks/runtime/heap.py): a pool
child starts with what the parent froze before the fork, and freezes what its first unit built once that unit
ends. Seen from inside a real prefork child, by a tool that reports `gc.get_freeze_count()` in two turns."""

from __future__ import annotations

import json

import pytest

from tests.support.fake_anthropic import text, tool_call

pytestmark = pytest.mark.integration


def test_a_pool_child_runs_on_a_frozen_heap_and_freezes_what_its_first_unit_built(stack):
    stack.env["BATON_TOOLS"] = "tests.support.heap_tools:TOOLS"
    stack.fake_api.set_handler(lambda body, index: tool_call("heap", {}) if index % 2 == 0 else text("Noted."))
    stack.worker(concurrency=1)  # prefork, one child: both turns run in it
    client = stack.client()

    seen = []
    for chat in ("first", "second"):
        assert client.wait(client.send_message(chat, "how is the heap?"), timeout=60).status == "completed"
        result = stack.fake_api.requests[-1]["messages"][-1]["content"][0]
        assert result["type"] == "tool_result"
        content = result["content"]
        seen.append(json.loads(content if isinstance(content, str) else content[0]["text"]))

    first, second = seen
    assert first["pid"] == second["pid"]
    assert first["frozen"] > 10_000  # the parent's modules and app, frozen before the fork
    assert second["frozen"] > first["frozen"]  # and what the child's first unit built (the SDK, its clients)
