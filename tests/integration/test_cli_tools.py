"""`baton tools` as a person runs it: a real `baton` process, its stdout and stderr read as printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import REPO

pytestmark = pytest.mark.integration


def baton_tools(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`baton tools ARGS` with only the BATON_* variables given here."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("BATON_")}
    return subprocess.run(
        [sys.executable, "-m", "tasks.cli", "tools", *args], cwd=REPO, capture_output=True, text=True, timeout=60,
        env={**base, "PYTHONPATH": str(REPO), "HOME": str(tmp_path), **env},
    )


def test_no_tools_is_said_with_how_to_add_them_and_json_keeps_its_shape(tmp_path: Path):
    """With neither BATON_TOOLS nor BATON_MCP_SERVERS, `baton tools` says there are none and names both
    variables (it printed nothing at all); `--json` is the usual object with an empty list."""
    listed = baton_tools(tmp_path)
    assert (listed.returncode, listed.stderr) == (0, ""), listed.stderr
    [line] = listed.stdout.splitlines() or [""]
    assert line.startswith("no tools:") and "BATON_TOOLS=" in line and "BATON_MCP_SERVERS=" in line, listed.stdout
    as_json = baton_tools(tmp_path, "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == {"tools": [], "servers": {}}
