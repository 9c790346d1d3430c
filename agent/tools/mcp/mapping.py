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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from jsonschema import Draft202012Validator, SchemaError

from agent.errors import ToolDefinitionError
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


Call = Callable[[str, dict[str, Any], "str | None"], str]
"""(tool's own name, arguments, idempotency key or None) -> the result's text; raises ToolError for an error."""


def baton_tool(server: str, remote: RemoteTool, mode: ApprovalMode, call: Call) -> Tool:
    """The Baton `Tool` of one MCP tool: `NAME__TOOL`, the server's description and schema, effect and approval
    from its annotations; its function sends the call through `call`."""
    name = baton_name(server, remote.name)
    if not TOOL_NAME.match(name):
        raise ToolDefinitionError(f"MCP tool {name!r} is not a name providers accept (letters, digits, _ or -, ≤ 64)")
    schema = checked_schema(remote.input_schema, f"MCP tool {name!r}")
    effect, idempotent = effect_of(remote.annotations)
    keyed = takes_key(schema)

    def fn(idempotency_key: str | None = None, **arguments: Any) -> str:
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
