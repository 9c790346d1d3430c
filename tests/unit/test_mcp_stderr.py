"""A stdio MCP server's stderr becomes log records of `baton.mcp`, one per line, `NAME: line` (issue 41)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.tools.mcp.stderr import MAX_LINE, StderrLog


def test_each_line_a_process_writes_is_one_record_named_after_its_server(caplog):
    """Lines split on newlines (CRLF too), blank ones dropped, the last one logged without its newline, a line
    longer than MAX_LINE in pieces; the reader ends once the process has exited."""
    caplog.set_level(logging.INFO, logger="baton.mcp")
    stderr = StderrLog("notes")
    script = f"printf 'one\\r\\n\\n  \\ntwo\\n%0{MAX_LINE + 10}d\\nlast' 0 >&2"
    subprocess.run(["sh", "-c", script], stderr=stderr.writer, check=True)
    stderr.spawned()
    assert stderr.join(5)
    said = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert said[:2] == [("baton.mcp", "INFO", "notes: one"), ("baton.mcp", "INFO", "notes: two")]
    assert [m for _, _, m in said[2:]] == ["notes: " + "0" * MAX_LINE, "notes: " + "0" * 10, "notes: last"]


def test_the_reader_waits_for_every_copy_of_the_write_end():
    """Until this process closes its own copy, end-of-file cannot come: the server's exit alone is not enough."""
    stderr = StderrLog("notes")
    subprocess.run(["true"], stderr=stderr.writer, check=True)
    assert not stderr.join(0.2)
    stderr.spawned()
    stderr.spawned()  # idempotent: the transport's exit closes it again
    assert stderr.join(5)


GREEN = """
from gevent import monkey; monkey.patch_all()
import logging, os, sys, time
from agent.tools.mcp.stderr import StderrLog
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(message)s")
stderr = StderrLog("quiet")
started = time.monotonic()
for _ in range(5):
    time.sleep(0.02)  # other greenlets' turn while the server has said nothing
print(f"ran {time.monotonic() - started:.2f}", flush=True)
stderr.writer.write("at last\\n"); stderr.spawned()
print("joined", stderr.join(5), flush=True)
"""


def test_under_gevents_monkey_patching_a_quiet_server_stalls_nothing():
    """Celery's gevent pool makes threads greenlets: a blocking read of the pipe stalled the whole process until
    the server wrote (here: for ever). The reader waits in gevent's select and the other greenlets run."""
    pytest.importorskip("gevent")
    repo = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", GREEN], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": repo}, cwd=repo)
    assert done.returncode == 0, done.stderr
    ran, said, joined = done.stdout.splitlines()
    assert float(ran.split()[1]) < 2 and said == "baton.mcp quiet: at last" and joined == "joined True"
