"""Connections to MCP servers for one process: one asyncio loop in a thread, one session per server.

The `mcp` SDK is asyncio; Baton's tool calls run on plain threads (`tool_threads`). So each process that calls
MCP tools runs one event loop in a daemon thread, and a tool thread submits its call to it with
`asyncio.run_coroutine_threadsafe`, then blocks on the future with a timeout. Each server has one live session,
held open by a task of its own (the SDK's transports are context managers that must be left in the task that
entered them). A session that ends (its server died), a call that times out, or a server that would not start
leaves the server down; the next call (or the next unit's listing) starts it again. Tool lists are cached per
server and refreshed when the server sends `notifications/tools/list_changed`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from typing import Any

from agent.errors import ToolError
from agent.tools.mcp.config import ServerSpec
from agent.tools.mcp.mapping import META_KEY, RemoteTool
from agent.tools.mcp.results import ToolValue, result_text, result_value
from agent.tools.mcp.stderr import stdio_logging_stderr

log = logging.getLogger("baton.mcp")

START_TIMEOUT = 20.0  # seconds a server has to start and list its tools
CLOSE_TIMEOUT = 5.0  # the SDK closes a stdio server's stdin, waits 2 s, then kills its process tree

Launch = Callable[[ServerSpec], Any]
"""A stdio server's spec -> the SDK's `StdioServerParameters` (how a coding run puts it in its sandbox)."""


def stdio_params(spec: ServerSpec) -> Any:
    """The plain launch: the file's command, args and env over the SDK's minimal inherited environment."""
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=spec.command or "", args=list(spec.args), env=dict(spec.env))


def remote_tools(listed: Any) -> tuple[RemoteTool, ...]:
    """The SDK's `tools/list` result as `RemoteTool`s (annotations as the wire spells them)."""
    out = []
    for t in listed:
        annotations = t.annotations.model_dump(by_alias=True, exclude_none=True) if t.annotations else {}
        out.append(RemoteTool(t.name, t.description or "", dict(t.input_schema), annotations))
    return tuple(out)


class Session:
    """One server's live session, held open by its own task until closed or the server goes away."""

    def __init__(self, spec: ServerSpec, launch: Launch, on_tools: Callable[[tuple[RemoteTool, ...]], None]) -> None:
        self.spec = spec
        self._launch = launch
        self._on_tools = on_tools
        self.session: Any = None
        self.ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready: asyncio.Future[tuple[RemoteTool, ...]] = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._task = asyncio.create_task(self._hold(), name=f"mcp:{spec.name}")

    async def ready(self, timeout: float) -> tuple[RemoteTool, ...]:
        """The server's tools once it has started; raises if it could not (it is then closed)."""
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            await self.close()
            raise ToolError(f"did not start within {timeout:g} s") from None

    @property
    def alive(self) -> bool:
        return self._ready.done() and not self._ready.exception() and not self.ended.done()

    async def _hold(self) -> None:
        try:
            async with AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._transport())
                from mcp.client.session import ClientSession

                session = await stack.enter_async_context(
                    ClientSession(streams[0], streams[1], message_handler=self._on_message)
                )
                await session.initialize()
                self.session = session
                tools = await self._list()
                self._ready.set_result(tools)
                await self._closing.wait()
        except BaseException as err:  # the server's death reaches here (or a cancel on close); both end it
            if not self._ready.done():
                self._ready.set_exception(ToolError(_reason(err)))
            if not isinstance(err, asyncio.CancelledError | Exception):
                raise
        finally:
            if not self._ready.done():
                self._ready.set_exception(ToolError("closed before it started"))
            if not self.ended.done():
                self.ended.set_result(None)

    def _transport(self) -> Any:
        if self.spec.transport == "stdio":
            # Its stderr to the log, one record per line (agent/tools/mcp/stderr.py): not between `baton tools`'
            # lines, and in a worker's log with a time, a level and the server's name.
            return stdio_logging_stderr(self._launch(self.spec), self.spec.name)
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        client = create_mcp_http_client(headers=dict(self.spec.headers))
        return _owning(client, streamable_http_client(self.spec.url or "", http_client=client))

    async def _list(self) -> tuple[RemoteTool, ...]:
        listed: list[Any] = []
        cursor = None
        while True:
            from mcp_types import PaginatedRequestParams

            page = await self.session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            listed += page.tools
            cursor = page.next_cursor
            if not cursor:
                return remote_tools(listed)

    async def _on_message(self, message: Any) -> None:
        from mcp_types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification) and self.session is not None:
            asyncio.get_running_loop().create_task(self._refresh())  # not inline: the reply arrives on this path

    async def _refresh(self) -> None:
        try:
            tools = await self._list()
        except Exception as err:
            log.warning("mcp: server %s: could not list its tools again: %s", self.spec.name, _reason(err))
            return
        log.info("mcp: server %s changed its tools: %s", self.spec.name, ", ".join(t.name for t in tools))
        self._on_tools(tools)

    async def call(self, tool: str, arguments: dict[str, Any], key: str | None, timeout: float) -> Any:
        """Call a tool; raises ToolError naming the server when it dies or does not answer in `timeout`."""
        meta = {META_KEY: key} if key is not None else None
        calling = asyncio.create_task(self.session.call_tool(tool, arguments, meta=meta))
        done, _ = await asyncio.wait({calling, self.ended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        if calling in done:
            return calling.result()
        calling.cancel()
        if self.ended in done:
            raise ToolError(f"MCP server {self.spec.name!r} died during the call; it is started again for the next one")
        await self.close()  # a hung server is restarted for the next call
        raise ToolError(f"MCP server {self.spec.name!r} did not answer within {timeout:g} s (BATON_MCP_TIMEOUT)")

    async def close(self) -> None:
        self._closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(self.ended), CLOSE_TIMEOUT)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._task, CLOSE_TIMEOUT)


@contextlib.asynccontextmanager
async def _owning(client: Any, transport: Any) -> Any:
    """The HTTP transport, closing the httpx client made for it when it closes."""
    async with client, transport as streams:
        yield streams


def _reason(err: BaseException) -> str:
    """A short reason, whatever nesting the SDK's task groups wrapped it in."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return str(err) or type(err).__name__


class Servers:
    """A process's MCP servers: their sessions on one loop thread, their last tool lists, sync entry points."""

    def __init__(
        self, specs: tuple[ServerSpec, ...], *, call_timeout: float, launch: Launch = stdio_params,
        start_timeout: float = START_TIMEOUT, retry_after: float = 5.0,
        closed_reason: str = "the worker is shutting down",
    ) -> None:
        self.specs = {s.name: s for s in specs}
        self.closed_reason = closed_reason
        self.call_timeout = call_timeout
        self.start_timeout = start_timeout
        self.retry_after = retry_after
        self._launch = launch
        self.tools: dict[str, tuple[RemoteTool, ...]] = {}
        self.errors: dict[str, str] = {}
        self._failed_at: dict[str, float] = {}
        self._sessions: dict[str, Session] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="baton-mcp", daemon=True)
        self._thread.start()

    def _submit(self, coro: Any, timeout: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def listing(self) -> dict[str, tuple[RemoteTool, ...]]:
        """Every server's tools, starting the servers that are down (a failed one again after `retry_after`).

        A server that has listed its tools once keeps them offered while it is down: its calls say so, naming it.
        """
        if self.specs and not self._closed:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                self._submit(self._start_all(), self.start_timeout + CLOSE_TIMEOUT + 1)
        return {name: self.tools[name] for name in self.specs if name in self.tools}

    async def _start_all(self) -> None:
        now = time.monotonic()
        due = [n for n in self.specs if now - self._failed_at.get(n, -1e9) >= self.retry_after]
        await asyncio.gather(*(self._ensure(n) for n in due), return_exceptions=True)

    async def _ensure(self, name: str) -> Session:
        lock = self._locks.setdefault(name, asyncio.Lock())
        async with lock:
            current = self._sessions.get(name)
            if current is not None and current.alive:
                return current
            if self._closed:
                raise ToolError(f"MCP server {name!r} is closed ({self.closed_reason})")
            if current is not None:
                await current.close()
            fresh = Session(self.specs[name], self._launch, lambda tools: self.tools.__setitem__(name, tools))
            self._sessions[name] = fresh
            try:
                self.tools[name] = await fresh.ready(self.start_timeout)
            except Exception as err:
                self.errors[name] = _reason(err)
                self._failed_at[name] = time.monotonic()
                log.error("mcp: server %s cannot start: %s", name, self.errors[name])
                raise ToolError(f"MCP server {name!r} is unavailable: {self.errors[name]}") from None
            self.errors.pop(name, None)
            self._failed_at.pop(name, None)
            log.info("mcp: server %s started (%d tools)", name, len(self.tools[name]))
            return fresh

    def call(self, server: str, tool: str, arguments: dict[str, Any], key: str | None) -> ToolValue:
        """Call `server`'s `tool` (starting the server if it is down): the result (agent/tools/mcp/results.py), or
        ToolError."""
        budget = self.start_timeout + self.call_timeout + CLOSE_TIMEOUT + 1
        try:
            result = self._submit(self._call(server, tool, arguments, key), budget)
        except concurrent.futures.TimeoutError:
            raise ToolError(f"MCP server {server!r} did not answer within {budget:g} s") from None
        if result.is_error:
            raise ToolError(result_text(result) or f"MCP tool {tool!r} of server {server!r} failed")
        return result_value(result)

    async def _call(self, server: str, tool: str, arguments: dict[str, Any], key: str | None) -> Any:
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        session = await self._ensure(server)
        try:
            return await session.call(tool, arguments, key, self.call_timeout)
        except MCPError as err:
            if err.error.code != CONNECTION_CLOSED:  # the server refused the request (unknown tool, bad arguments)
                raise ToolError(f"MCP server {server!r}: {err.error.message}") from None
            await session.close()  # it went away mid-call: started again for the next call
            died = f"MCP server {server!r} died during the call; it is started again for the next one"
            raise ToolError(died) from None
        except ToolError:
            raise
        except Exception as err:
            await session.close()
            raise ToolError(f"MCP server {server!r} failed during the call: {_reason(err)}") from None

    def close(self, timeout: float = CLOSE_TIMEOUT + 1) -> None:
        """Close every session (a stdio server is stopped) within `timeout`, then the loop."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._submit(self._close_all(), timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(1.0)
        if not self._thread.is_alive():  # its selector's fds too: a run's own servers make a loop per execution
            self._loop.close()

    async def _close_all(self) -> None:
        await asyncio.gather(*(s.close() for s in self._sessions.values()), return_exceptions=True)

    def status(self) -> Mapping[str, str | None]:
        """Each server's last start error (None: up or never tried)."""
        return {name: self.errors.get(name) for name in self.specs}
