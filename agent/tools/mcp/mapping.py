"""What an MCP tool is to Baton's ledger, decided from its annotations alone (pure: no SDK, no I/O).

MCP's tool annotations are exactly what the write-ahead ledger needs to know:

- `readOnlyHint: true` is a `read` (deduplicated within a round, re-run freely after a crash);
- anything else is a `write`: journaled `committing` before the call, and never blindly re-run;
- `idempotentHint: true` on a write makes it idempotent under its key: a crash mid-call re-runs it with the same
  key, so the server can tell the repeat and do it once.

Every call carries its key (stable across the executions of one tool call) in the request's `_meta` as
`baton/idempotency_key`, and also as the `idempotency_key` argument when the tool's input schema declares one
(Baton's key then replaces whatever the model put there).

An absent annotation takes MCP's default: `readOnlyHint` false, `idempotentHint` false, `destructiveHint` true.
So a server that says nothing gets the safe reading: an unrepeatable, destructive write.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from jsonschema import Draft202012Validator, SchemaError

from agent.errors import ToolDefinitionError, ToolError
from agent.tools import IDEMPOTENCY_PARAM, Effect, Tool

ApprovalMode = Literal["none", "destructive", "writes"]
SEPARATOR = "__"
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # what both providers accept as a tool's name
META_KEY = "baton/idempotency_key"


@dataclass(frozen=True)
class RemoteTool:
    """A tool as an MCP server lists it (its `tools/list` entry, annotations as the wire spells them)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    annotations: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


def baton_name(server: str, tool: str) -> str:
    """`NAME__TOOL`: the server's name keeps two servers' same-named tools apart."""
    return f"{server}{SEPARATOR}{tool}"


def effect_of(annotations: Mapping[str, Any]) -> tuple[Effect, bool]:
    """(effect, idempotent) from the annotations: only `readOnlyHint: true` is a read."""
    if annotations.get("readOnlyHint") is True:
        return "read", False
    return "write", annotations.get("idempotentHint") is True


def needs_approval(annotations: Mapping[str, Any], mode: ApprovalMode) -> bool:
    """Whether a call waits for a person under `BATON_MCP_APPROVAL`: reads never; `destructive`: a write whose
    `destructiveHint` is not false (MCP's default is true); `writes`: every write."""
    effect, _ = effect_of(annotations)
    if effect == "read" or mode == "none":
        return False
    return mode == "writes" or annotations.get("destructiveHint") is not False


def checked_schema(schema: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The input schema as the server gave it, once it is a valid JSON schema of an object."""
    if not isinstance(schema, Mapping) or schema.get("type") != "object":
        raise ToolDefinitionError(f"{where}: its input schema is not a JSON schema of an object")
    try:
        Draft202012Validator.check_schema(dict(schema))
    except SchemaError as err:
        raise ToolDefinitionError(f"{where}: its input schema is invalid: {err.message}") from err
    return dict(schema)


def takes_key(schema: Mapping[str, Any]) -> bool:
    """Whether the tool's schema declares an `idempotency_key` argument (then the key is passed there too)."""
    properties = schema.get("properties")
    return isinstance(properties, Mapping) and IDEMPOTENCY_PARAM in properties


Call = Callable[[str, dict[str, Any], "str | None"], Any]
"""(tool's own name, arguments, idempotency key or None) -> the result as a tool returns it (a text, or texts and
images: agent/tools/mcp/results.py); raises ToolError for an error."""


def baton_tool(server: str, remote: RemoteTool, mode: ApprovalMode, call: Call) -> Tool:
    """The Baton `Tool` of one MCP tool: `NAME__TOOL`, the server's description and schema, effect and approval
    from its annotations; its function sends the call through `call`."""
    name = baton_name(server, remote.name)
    if not TOOL_NAME.match(name):
        raise ToolDefinitionError(f"MCP tool {name!r} is not a name providers accept (letters, digits, _ or -, ≤ 64)")
    schema = checked_schema(remote.input_schema, f"MCP tool {name!r}")
    effect, idempotent = effect_of(remote.annotations)
    keyed = takes_key(schema)

    def fn(idempotency_key: str | None = None, **arguments: Any) -> Any:
        if keyed and idempotency_key is not None:
            arguments = {**arguments, IDEMPOTENCY_PARAM: idempotency_key}
        return call(remote.name, arguments, idempotency_key)

    fn.__module__ = f"mcp:{server}"
    return Tool(
        name=name,
        description=remote.description or remote.name,
        input_schema=schema,
        effect=effect,
        fn=fn,
        idempotent=idempotent,
        approval=needs_approval(remote.annotations, mode),
        server=server,
    )


def server_of(name: str, servers: Mapping[str, object]) -> tuple[str, str] | None:
    """(server, tool) when `name` is `NAME__TOOL` of a configured server, else None."""
    server, sep, tool = name.partition(SEPARATOR)
    return (server, tool) if sep and tool and server in servers else None


def unavailable_text(server: str, tool: str, error: str | None, listed: bool) -> str:
    """What a call to a configured server's tool that this worker does not offer answers (an `is_error` result)."""
    if error is not None:
        return f"MCP server {server!r} is unavailable: {error}; it is started again for a later call"
    if listed:
        return f"MCP server {server!r} does not list a tool {tool!r}"
    return f"MCP server {server!r} is not connected on this worker; it is started again for a later call"


def stand_in(server: str, tool: str, text: str) -> Tool:
    """The tool a call to `NAME__TOOL` resolves to when its server offers no such tool here (it never started on
    this worker, or is down, or dropped the tool): it runs nothing and answers `text` as an error.

    Without the server's annotations its effect is MCP's default, an unrepeatable write: a call another worker
    journaled `committing` is answered with the placeholder, never re-run, and a new call's write-ahead entry costs
    one write and protects nothing it could repeat.
    """

    def fn(idempotency_key: str | None = None, **_: Any) -> str:
        raise ToolError(text)

    fn.__module__ = f"mcp:{server}"
    return Tool(
        name=baton_name(server, tool),
        description=text,
        input_schema={"type": "object"},
        effect="write",
        fn=fn,
        server=server,
    )


class ToolSet(Mapping[str, Tool]):
    """The tools a unit offers the model (what iterating, `len` and `values` see), plus a stand-in looked up for
    `NAME__TOOL` of a configured server that does not offer it here, so its call says why, naming the server,
    instead of "unknown tool"."""

    def __init__(self, offered: Mapping[str, Tool], missing: Callable[[str], Tool | None]) -> None:
        self._offered = offered
        self._missing = missing

    def __getitem__(self, name: str) -> Tool:
        found = self._offered.get(name)
        if found is None:
            found = self._missing(name)
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._offered)

    def __len__(self) -> int:
        return len(self._offered)
