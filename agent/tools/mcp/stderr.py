"""A stdio MCP server's stderr, to the log: one record per line, `NAME: line`, on the logger `baton.mcp`.

Servers write to stderr freely ("Starting default (STDIO) server...", "Secure MCP Filesystem Server running on
stdio", a traceback when they fail to start). Handed the process's own stderr, those lines landed between `baton
tools`' output lines and, in a worker, outside its log records (no time, no level, no server named). So each
server gets a pipe of its own as stderr: a thread reads it and logs each line at INFO, named after the server. A
worker's log (`-l info`) then carries them like any record, redacted like any record; `baton tools`, which shows
`baton.mcp` only with `--debug`, prints none of them otherwise.

The pipe's write end must be closed here once the server has been spawned: the server holds its own copy, and the
reader sees end-of-file only when every copy is closed (the server, and whatever it started, has exited).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from collections.abc import AsyncIterator
from typing import Any, TextIO

log = logging.getLogger("baton.mcp")

MAX_LINE = 8192  # bytes: a longer line is logged in pieces, so a server writing no newline cannot grow a buffer


class StderrLog:
    """A pipe whose write end (`writer`) is a server's stderr and whose lines are logged as `NAME: line`."""

    def __init__(self, name: str, logger: logging.Logger = log) -> None:
        self.name = name
        self._logger = logger
        read_fd, write_fd = os.pipe()  # both close-on-exec: only the server's fd 2 (a dup) reaches a child
        self.writer: TextIO = os.fdopen(write_fd, "w")
        # Non-blocking, waited on with select: under Celery's gevent pool this thread is a greenlet, and a blocking
        # read would stall the whole worker until the server wrote; gevent's patched select yields instead. (Only
        # this end: the server's stderr, the other open file, stays blocking.)
        os.set_blocking(read_fd, False)
        self._reader = threading.Thread(target=self._pump, args=(read_fd,), name=f"mcp-stderr:{name}", daemon=True)
        self._reader.start()

    def _pump(self, fd: int) -> None:
        pending = b""
        try:
            while True:
                select.select([fd], [], [])
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:  # woken with nothing to read after all
                    continue
                if not chunk:
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    self._log(line)
                while len(pending) >= MAX_LINE:  # a line with no end in sight: its pieces so far
                    self._log(pending[:MAX_LINE])
                    pending = pending[MAX_LINE:]
            self._log(pending)  # a last line without its newline
        finally:
            os.close(fd)

    def _log(self, raw: bytes) -> None:
        """One line as records: one, or one per MAX_LINE bytes of a longer line (pieces cut from its start, so
        however the reads split it)."""
        raw = raw.rstrip(b"\r")
        for start in range(0, len(raw), MAX_LINE):
            line = raw[start:start + MAX_LINE].decode("utf-8", "replace")
            if line.strip():
                self._logger.info("%s: %s", self.name, line)

    def join(self, timeout: float) -> bool:
        """Wait up to `timeout` for the server's every copy to close and each line to be logged; whether it did."""
        self._reader.join(timeout)
        return not self._reader.is_alive()

    def spawned(self) -> None:
        """Close this process's copy of the write end (idempotent): end-of-file comes when the server's closes."""
        self.writer.close()


@contextlib.asynccontextmanager
async def stdio_logging_stderr(params: Any, name: str) -> AsyncIterator[Any]:
    """The `mcp` SDK's `stdio_client(params)`, the server's stderr going to the log as `name`'s."""
    from mcp.client.stdio import stdio_client

    stderr = StderrLog(name)
    try:
        async with stdio_client(params, errlog=stderr.writer) as streams:
            stderr.spawned()
            yield streams
    finally:
        stderr.spawned()  # a spawn that failed: the reader ends at once
