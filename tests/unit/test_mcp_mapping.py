"""MCP's pure parts: the servers file, names, and what the annotations make of a tool for the ledger."""

from __future__ import annotations

import json

import pytest

from agent.errors import McpConfigError, ToolDefinitionError
from agent.loop.cancel import CancelToken
from agent.loop.edge import LoopConfig
from agent.loop.memory_edge import MemoryEdge
from agent.loop.policy import Backoff, Driver
from agent.loop.run import run_loop
from agent.loop.state import LoopState
from agent.messages import INTERRUPTED_RESULT, user_text
from agent.provider.scripted import ScriptedProvider, reply_text, reply_tool
from agent.tools import execute, tool
from agent.tools.mcp.config import load_servers, parse_servers
from agent.tools.mcp.mapping import (
    RemoteTool,
    ToolSet,
    baton_tool,
    effect_of,
    needs_approval,
    server_of,
    stand_in,
    unavailable_text,
)
from agent.tools.mcp.results import result_text


def _doc(servers: dict) -> str:
    return json.dumps({"mcpServers": servers})


def test_stdio_and_http_servers_parse_in_file_order():
    specs = parse_servers(_doc({
        "gh": {"command": "npx", "args": ["-y", "server-github"], "env": {"TOKEN": "x"}},
        "db": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer y"}},
    }))
    assert [(s.name, s.transport) for s in specs] == [("gh", "stdio"), ("db", "http")]
    assert specs[0].args == ("-y", "server-github") and dict(specs[0].env) == {"TOKEN": "x"}
    assert dict(specs[1].headers) == {"Authorization": "Bearer y"}
    assert "Bearer" not in repr(specs[1])  # headers hold credentials: kept out of reprs and logs


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "not JSON"),
        ("[]", "mcpServers"),
        (_doc({"a__b": {"command": "x"}}), "without '__'"),
        (_doc({"bad name": {"command": "x"}}), "server name"),
        (_doc({"a": {"command": "x", "url": "http://h"}}), "exactly one"),
        (_doc({"a": {}}), "exactly one"),
        (_doc({"a": {"command": ""}}), "non-empty"),
        (_doc({"a": {"command": "x", "args": "-v"}}), "'args'"),
        (_doc({"a": {"command": "x", "env": {"K": 1}}}), "'env'"),
        (_doc({"a": {"url": "ftp://h"}}), "'url'"),
        (_doc({"a": {"url": "http://h", "headers": []}}), "'headers'"),
        (_doc({"a": {"command": "x", "cwd": "/"}}), "unknown keys"),
    ],
)
def test_a_bad_file_says_what_is_wrong(text, says):
    with pytest.raises(McpConfigError, match=says):
        parse_servers(text)


def test_an_unreadable_file_and_no_file(tmp_path):
    assert load_servers("") == ()
    with pytest.raises(McpConfigError, match="cannot read"):
        load_servers(str(tmp_path / "missing.json"))


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({"readOnlyHint": True}, ("read", False)),
        ({"readOnlyHint": True, "idempotentHint": True}, ("read", False)),
        ({}, ("write", False)),  # MCP's defaults: not read-only, not idempotent
        ({"readOnlyHint": False}, ("write", False)),
        ({"idempotentHint": True}, ("write", True)),
        ({"readOnlyHint": "yes"}, ("write", False)),  # only a real true counts
    ],
)
def test_effect_from_annotations(annotations, expected):
    assert effect_of(annotations) == expected


@pytest.mark.parametrize(
    ("annotations", "mode", "waits"),
    [
        ({"readOnlyHint": True}, "writes", False),
        ({}, "none", False),
        ({}, "destructive", True),  # destructiveHint defaults to true
        ({"destructiveHint": False}, "destructive", False),
        ({"destructiveHint": True}, "destructive", True),
        ({"destructiveHint": False}, "writes", True),
    ],
)
def test_approval_modes(annotations, mode, waits):
    assert needs_approval(annotations, mode) is waits


SCHEMA = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}


def _recorder():
    seen: list[tuple[str, dict, str | None]] = []

    def call(tool: str, arguments: dict, key: str | None) -> str:
        seen.append((tool, arguments, key))
        return "ok"

    return seen, call


def test_a_remote_tool_becomes_a_baton_tool_named_for_its_server():
    seen, call = _recorder()
    remote = RemoteTool("put", "Put a note.", SCHEMA, {"idempotentHint": True, "destructiveHint": False})
    t = baton_tool("notes", remote, "destructive", call)
    assert (t.name, t.description, t.input_schema, t.server, t.source) == (
        "notes__put", "Put a note.", SCHEMA, "notes", "mcp:notes"
    )
    assert (t.effect, t.idempotent, t.approval) == ("write", True, False)
    assert t.to_api() == {"name": "notes__put", "description": "Put a note.", "input_schema": SCHEMA}
    assert execute(t, {"note": "n"}, idempotency_key="chat:c:toolu_1").content == "ok"
    assert seen == [("put", {"note": "n"}, "chat:c:toolu_1")]  # the key goes in _meta, not the arguments


def test_the_key_is_also_an_argument_when_the_schema_declares_one():
    seen, call = _recorder()
    schema = {"type": "object", "properties": {"note": {"type": "string"}, "idempotency_key": {"type": "string"}}}
    t = baton_tool("s", RemoteTool("put", "", schema, {"idempotentHint": True}), "none", call)
    execute(t, {"note": "n", "idempotency_key": "from-the-model"}, idempotency_key="k")
    assert seen == [("put", {"note": "n", "idempotency_key": "k"}, "k")]
    assert t.description == "put"  # no description: the tool's name


@pytest.mark.parametrize(
    ("name", "schema", "says"),
    [
        ("x" * 70, SCHEMA, "not a name"),
        ("has space", SCHEMA, "not a name"),
        ("t", {"type": "array"}, "not a JSON schema of an object"),
        ("t", {"type": "object", "properties": {"a": {"type": "nope"}}}, "invalid"),
    ],
)
def test_a_tool_providers_could_not_take_is_refused(name, schema, says):
    with pytest.raises(ToolDefinitionError, match=says):
        baton_tool("s", RemoteTool(name, "", schema), "none", _recorder()[1])


def test_a_result_is_its_text_parts_or_its_structured_content():
    from mcp_types import CallToolResult, ImageContent, TextContent

    mixed = CallToolResult(
        content=[TextContent(type="text", text="a"), ImageContent(type="image", data="", mime_type="image/png")]
    )
    assert result_text(mixed) == (
        "a\n[image content (image/png): not an image type a model takes (PNG, JPEG, GIF, WebP)]"
    )
    assert result_text(CallToolResult(content=[], structured_content={"n": 1})) == '{"n": 1}'


def _unavailable_set(error: str | None = "cannot start: no such file", listed: bool = False):

    @tool(effect="read")
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    def missing(name: str):
        found = server_of(name, {"notes": None})
        return stand_in(*found, unavailable_text(*found, error, listed)) if found else None

    return ToolSet({"lookup": lookup}, missing)

def _round(tools, edge, call_id: str = "toolu_w"):
    config = LoopConfig(owner_id="chat:c", turn_id="t1", driver=Driver.CHAT_TURN, model="m", max_rounds=3,
                        retry_budget=1, backoff=Backoff(scale=0.0))
    provider = ScriptedProvider([reply_tool("notes__put_note", {"note": "n"}, call_id=call_id), reply_text("ok")])
    state = run_loop([user_text("go", turn_id="t1")], LoopState(), provider=provider, tools=tools, edge=edge,
                     cancel=CancelToken(), config=config)
    (result,) = [b for m in state.messages for b in getattr(m, "tool_results", ())]
    return result, provider


def test_a_call_to_a_configured_servers_tool_it_does_not_offer_names_the_server():
    """The server is configured but its tools are not offered here (it never started on this worker): the call is
    an is_error naming it, both events carry the server, and the stand-in is never offered to the model."""
    tools = _unavailable_set()
    assert list(tools) == ["lookup"] and "notes__put_note" in tools and tools.get("other__x") is None
    edge = MemoryEdge()
    result, provider = _round(tools, edge)
    assert result.is_error and result.content == (
        "MCP server 'notes' is unavailable: cannot start: no such file; it is started again for a later call"
    )
    assert [t["name"] for t in provider.requests[0].tools] == ["lookup"]
    servers = {kind: data.get("server") for kind, data in edge.events if kind in ("tool.called", "tool.result")}
    assert servers == {"tool.called": "notes", "tool.result": "notes"}


def test_a_write_journaled_elsewhere_is_not_re_run_by_a_stand_in():
    """Another worker journaled the call `committing` and died; here its server is down: the call is answered
    with the placeholder (the stand-in takes MCP's default, an unrepeatable write), not "unknown tool"."""
    edge = MemoryEdge(steps={"tool:toolu_w": {"kind": "tool", "status": "committing", "name": "notes__put_note"}})
    result, _ = _round(_unavailable_set(error=None, listed=True), edge)
    assert result.content == INTERRUPTED_RESULT and result.synthesized
