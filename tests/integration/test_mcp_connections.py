"""One process's MCP connections against a real stdio server (tests/support/mcp_server.py), without workers:
a tool list changed at runtime, a call past its timeout, and a call to a configured server that is not connected.
"""

from __future__ import annotations

import json
import sys
from types import MappingProxyType

import pytest

from agent.errors import ToolError
from agent.tools import execute
from agent.tools.mcp.config import ServerSpec
from agent.tools.mcp.connections import Servers
from config.settings import Settings
from tasks.execution import wiring
from tests.support.processes import REPO, wait_until

pytestmark = pytest.mark.integration

SPEC = ServerSpec(
    name="srv", command=sys.executable, args=("-m", "tests.support.mcp_server"),
    env=MappingProxyType({"PYTHONPATH": str(REPO)}),
)


@pytest.fixture
def servers(request):
    made = Servers((SPEC,), call_timeout=getattr(request, "param", 20.0))
    yield made
    made.close()


def test_a_tool_added_at_runtime_is_listed_after_list_changed(servers):
    """The server adds a tool and sends notifications/tools/list_changed: the cached list is refreshed, and the
    next listing offers the new tool, which answers."""
    before = {t.name for t in servers.listing()["srv"]}
    assert "fresh" not in before
    assert servers.call("srv", "add_tool", {"name": "fresh"}, None) == "added fresh"
    wait_until(lambda: "fresh" in {t.name for t in servers.tools["srv"]}, 10, what="the refreshed tool list")
    assert "fresh" in {t.name for t in servers.listing()["srv"]}
    assert servers.call("srv", "fresh", {}, None) == "fresh was added at runtime"


@pytest.mark.parametrize("servers", [1.0], indirect=True)
def test_a_call_past_the_timeout_is_an_error_naming_the_server_and_the_next_call_works(servers):
    """BATON_MCP_TIMEOUT fires: the call fails naming the server, the hung server is closed, the next call starts
    it again and works."""
    servers.listing()
    with pytest.raises(ToolError, match=r"MCP server 'srv' did not answer within 1 s \(BATON_MCP_TIMEOUT\)"):
        servers.call("srv", "slow", {"seconds": 30}, None)
    assert servers.call("srv", "slow", {"seconds": 0}, None) == "slept 0.0"


def test_a_configured_server_that_is_not_connected_answers_naming_it(tmp_path):
    """`NAME__TOOL` of a configured server whose tools this worker does not offer (it never started here) is an
    is_error result naming the server, not "unknown tool"; it is not offered to the model; other names stay
    unknown."""
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"broken": {"command": "/nonexistent/mcp-server"}}}))
    settings = Settings(mcp_servers=str(path))
    try:
        tools = wiring.chat_tools(settings)
        assert not any(name.startswith("broken__") for name in tools)
        stand_in = tools.get("broken__put_note")
        assert stand_in is not None and stand_in.server == "broken" and stand_in.effect == "write"
        outcome = execute(stand_in, {"note": "n"}, idempotency_key="chat:c:toolu_1")
        assert outcome.is_error and outcome.content.startswith("MCP server 'broken' is unavailable: ")
        assert tools.get("other__x") is None and tools.get("put_note") is None
    finally:
        wiring.close_mcp(5.0)
