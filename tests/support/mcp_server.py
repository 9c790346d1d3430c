"""A real MCP server written with the `mcp` SDK, counting its calls in the test's Redis (like counting_tools.py).

Run as `python -m tests.support.mcp_server [stdio|http PORT]`. Its environment (the servers file's `env`) gives
`MCP_TEST_REDIS` (where it counts; without it, nothing is counted) and `MCP_TEST_NAME` (the server's name in the
file, prefixing its keys).
`MCP_TEST_STDERR` (lines, `|`-separated) is written to its stderr at start, as the reference servers write their
banners there; the tool `say_on_stderr` writes one more line mid-session.
Its pid is pushed to `mcp:{name}:pids` at start and to `mcp:{name}:closed` when its stdin closes, so a test can
tell which processes were started and whether each was shut down by the client.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import redis
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

NAME = os.environ.get("MCP_TEST_NAME", "srv")
server = MCPServer(NAME)


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["MCP_TEST_REDIS"], socket_timeout=None)


def key(name: str, what: str) -> str:
    """A key of the server `name` (tests read the same keys)."""
    return f"mcp:{name}:{what}"


def _count(tool: str, detail: str) -> int:
    client = _redis()
    client.rpush(key(NAME, "log"), f"{tool}:{detail}")
    return int(client.incr(key(NAME, f"calls:{tool}")))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(key_name: str) -> str:
    """Look a key up (counts its calls)."""
    return f"value-of-{key_name} (call {_count('lookup', key_name)})"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def record_note(note: str) -> str:
    """Record a note (a side effect; counts its calls)."""
    return f"recorded {note!r} (call {_count('record_note', note)})"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_note(note: str) -> str:
    """Delete a note (destructive; counts its calls)."""
    return f"deleted {note!r} (call {_count('delete_note', note)})"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False))
def put_note(note: str, ctx: Context) -> str:
    """Store a note under the caller's idempotency key (idempotent; counts calls and keeps each key)."""
    meta: Any = ctx.request_context.meta or {}
    if not isinstance(meta, dict):
        meta = meta.model_dump(by_alias=True)
    idem = meta.get("baton/idempotency_key")
    _redis().rpush(key(NAME, "keys"), str(idem))
    return f"put {note!r} (call {_count('put_note', note)})"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def blocking_write(note: str) -> str:
    """A write that blocks until the test releases it (counts its calls)."""
    client = _redis()
    n = _count("blocking_write", note)
    client.rpush(key(NAME, "started"), note)
    client.blpop([key(NAME, "release")], timeout=60)
    return f"wrote {note!r} (call {n})"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False))
def blocking_put(note: str, ctx: Context) -> str:
    """An idempotent write that keeps the caller's key, then blocks until the test releases it (counts its calls)."""
    meta: Any = ctx.request_context.meta or {}
    if not isinstance(meta, dict):
        meta = meta.model_dump(by_alias=True)
    client = _redis()
    client.rpush(key(NAME, "keys"), str(meta.get("baton/idempotency_key")))
    n = _count("blocking_put", note)
    client.rpush(key(NAME, "started"), note)
    client.blpop([key(NAME, "release")], timeout=60)
    return f"put {note!r} (call {n})"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def say_on_stderr(line: str) -> str:
    """Write `line` to the server's stderr (where a client must not let it reach its own output)."""
    print(line, file=sys.stderr, flush=True)
    return f"said {line!r}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def crash(reason: str) -> str:
    """Exit the server process mid-call (the client sees its server die)."""
    _count("crash", reason)
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def slow(seconds: float) -> str:
    """Answer after `seconds` (a server that does not answer in time)."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
async def add_tool(name: str, ctx: Context) -> str:
    """Offer a new read tool `name`, and tell the client its tool list changed."""

    def added() -> str:
        return f"{name} was added at runtime"

    server.add_tool(added, name=name, description=f"added at runtime: {name}",
                    annotations=ToolAnnotations(read_only_hint=True))
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def probe(what: str) -> str:
    """Try to reach something from inside the server: `env`, `redis`, `secret PATH`; says what it found."""
    if what == "env":
        return " ".join(sorted(os.environ))
    if what.startswith("redis "):
        import socket

        host, _, port = what.split(" ", 1)[1].partition(":")
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return "reached"
        except OSError as err:
            return f"unreachable: {err}"
    if what.startswith("read "):
        try:
            with open(what.split(" ", 1)[1]) as fh:
                return "read: " + fh.read(200)
        except OSError as err:
            return f"unreadable: {err}"
    return f"cwd={os.getcwd()}"


def main(argv: list[str]) -> None:
    counting = "MCP_TEST_REDIS" in os.environ
    for line in filter(None, os.environ.get("MCP_TEST_STDERR", "").split("|")):
        print(line, file=sys.stderr, flush=True)
    if counting:
        _redis().rpush(key(NAME, "pids"), os.getpid())
    if argv[:1] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(argv[1]))
        return
    try:
        server.run("stdio")
    finally:
        if counting:
            _redis().rpush(key(NAME, "closed"), os.getpid())
    if os.environ.get("MCP_TEST_LINGER"):
        # A server that outlives its stdin (one that forks workers does): only the client's terminate ends it.
        import time

        while True:
            time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1:])
