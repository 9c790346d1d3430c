"""The `BATON_MCP_SERVERS` file: the `mcpServers` JSON that MCP clients use, read into frozen server specs.

    {"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}},      a stdio server
                    "NAME": {"url": "https://...", "headers": {...}}}}              a streamable-HTTP one

Everything is checked here, before a worker forks, so a bad file stops the worker at start naming the variable
instead of failing every unit later. A server's name becomes the prefix of its tools (`NAME__TOOL`), so it is
held to what every provider accepts in a tool name and may not contain the `__` separator itself.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from agent.errors import McpConfigError

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
STDIO_KEYS = frozenset({"command", "args", "env", "type"})  # "type" ("stdio", "http") is allowed and unused
HTTP_KEYS = frozenset({"url", "headers", "type"})


@dataclass(frozen=True)
class ServerSpec:
    """One MCP server as the file describes it."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"


def _strings(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise McpConfigError(f"{what} must be an object of strings")
    return dict(value)


def _server(name: Any, body: Any) -> ServerSpec:
    if not isinstance(name, str) or not SERVER_NAME.match(name) or "__" in name:
        raise McpConfigError(f"server name {name!r} must be 1-32 letters, digits, '_' or '-', without '__'")
    if not isinstance(body, dict):
        raise McpConfigError(f"server {name!r} must be an object")
    if ("command" in body) == ("url" in body):
        raise McpConfigError(f"server {name!r} needs exactly one of 'command' (stdio) or 'url' (streamable HTTP)")
    if "command" in body:
        unknown = set(body) - STDIO_KEYS
        if unknown:
            raise McpConfigError(f"server {name!r}: unknown keys {sorted(unknown)}")
        command, args = body["command"], body.get("args", [])
        if not isinstance(command, str) or not command.strip():
            raise McpConfigError(f"server {name!r}: 'command' must be a non-empty string")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise McpConfigError(f"server {name!r}: 'args' must be a list of strings")
        env = _strings(body.get("env", {}), f"server {name!r}: 'env'")
        return ServerSpec(name=name, command=command, args=tuple(args), env=MappingProxyType(env))
    unknown = set(body) - HTTP_KEYS
    if unknown:
        raise McpConfigError(f"server {name!r}: unknown keys {sorted(unknown)}")
    url = body["url"]
    if not isinstance(url, str) or not re.match(r"^https?://[^\s/]+", url):
        raise McpConfigError(f"server {name!r}: 'url' must be an http:// or https:// URL")
    headers = _strings(body.get("headers", {}), f"server {name!r}: 'headers'")
    return ServerSpec(name=name, url=url, headers=MappingProxyType(headers))


def parse_servers(text: str) -> tuple[ServerSpec, ...]:
    """The servers of an `mcpServers` document, in file order; `McpConfigError` says what is wrong."""
    try:
        document = json.loads(text)
    except ValueError as err:
        raise McpConfigError(f"not JSON: {err}") from err
    if not isinstance(document, dict) or not isinstance(document.get("mcpServers"), dict):
        raise McpConfigError('expected an object {"mcpServers": {NAME: {...}}}')
    return tuple(_server(name, body) for name, body in document["mcpServers"].items())


def load_servers(path: str) -> tuple[ServerSpec, ...]:
    """Read and parse the file at `path` (empty path: no servers)."""
    if not path:
        return ()
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as err:
        raise McpConfigError(f"cannot read {path}: {err.strerror}") from err
    return parse_servers(text)
