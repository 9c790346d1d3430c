"""`baton worker` started as a person starts it: Celery's own worker options, from a virtualenv not activated."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Stack
from tests.support.processes import REPO, wait_until

pytestmark = pytest.mark.integration


def test_baton_worker_passes_celerys_options_on_and_finds_celery_without_path(scripted_stack: Stack, tmp_path: Path):
    """`baton worker -c 2 -P threads -Q QUEUE -l debug --hostname x@%h` with a PATH holding no `celery` (the
    interpreter's virtualenv is not activated): the worker starts with those options (its banner and log say so,
    `-l debug` replacing our `-l info`) and completes a turn published to QUEUE, which it consumes only because
    `-Q` reached Celery (its own BATON_QUEUE names another queue)."""
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    assert shutil.which("celery", path=str(empty_bin)) is None
    env = {**scripted_stack.env, "PATH": str(empty_bin), "BATON_QUEUE": "not-this-one"}
    node = f"cli-{scripted_stack.queue}"
    log_path = tmp_path / "baton-worker.log"
    argv = [sys.executable, "-m", "tasks.cli", "worker", "-c", "2", "-P", "threads", "-Q", scripted_stack.queue,
            "-l", "debug", "--hostname", f"{node}@%h", "--without-mingle", "--without-gossip"]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"baton worker exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        return " ready." in log_path.read_text(errors="replace")

    try:
        wait_until(ready, 60, what="baton worker ready")
        client = scripted_stack.client()
        result = client.wait(client.send_message("cli-worker", "hello"), timeout=60)
        assert result.status == "completed", result
        text = log_path.read_text(errors="replace")
        assert "concurrency: 2 (thread)" in text, text[:3000]
        assert f"{node}@{socket.gethostname()} ready." in text
        assert f".> {scripted_stack.queue} " in text  # the banner's queue list: ours, not BATON_QUEUE's
        assert ": DEBUG/MainProcess]" in text  # `-l debug` won over the default `-l info`
        assert "Task baton.chat_turn[" in text  # it took the turn (no other worker serves the queue)
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have exited already (a failed start)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
