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


BANNERS = ["Starting default (STDIO) server...", "Secure MCP Filesystem Server running on stdio"]


def test_what_an_mcp_server_writes_to_stderr_is_not_printed_between_the_lines_unless_at_debug(tmp_path: Path):
    """A real stdio server writing the reference servers' banners to its stderr: `baton tools` prints its listing
    and nothing else, on stdout or stderr (the banners came out between its lines); `--debug` shows them, as log
    records naming the server."""
    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"notes": {
        "command": sys.executable, "args": ["-m", "tests.support.mcp_server"],
        "env": {"PYTHONPATH": str(REPO), "MCP_TEST_NAME": "notes", "MCP_TEST_STDERR": "|".join(BANNERS)},
    }}}))
    listed = baton_tools(tmp_path, BATON_MCP_SERVERS=str(servers))
    assert (listed.returncode, listed.stderr) == (0, ""), listed.stderr
    lines = listed.stdout.splitlines()
    assert lines and all(line.startswith("notes__") and line.endswith("mcp:notes") for line in lines), lines
    assert "notes__lookup" in listed.stdout
    debug = baton_tools(tmp_path, "--debug", BATON_MCP_SERVERS=str(servers))
    assert debug.returncode == 0 and debug.stdout == listed.stdout, debug.stderr
    assert [x for x in debug.stderr.splitlines() if "notes: " in x] == [f"INFO baton.mcp: notes: {b}" for b in BANNERS]


def test_a_server_that_cannot_start_points_to_debug_which_shows_why(tmp_path: Path):
    """A stdio server that writes why it fails to stderr and exits: `baton tools` says it is unavailable (exit 1)
    and where its stderr is; `--debug` shows that stderr, named."""
    servers = tmp_path / "mcp.json"
    servers.write_text(json.dumps({"mcpServers": {"broken": {
        "command": sys.executable,
        "args": ["-c", "import sys; print('CRM_TOKEN is not set', file=sys.stderr); exit(1)"],
    }}}))
    listed = baton_tools(tmp_path, BATON_MCP_SERVERS=str(servers))
    assert listed.returncode == 1 and "CRM_TOKEN" not in listed.stdout + listed.stderr, listed.stderr
    assert "mcp server broken: unavailable: " in listed.stderr
    assert "(what it wrote to stderr: baton tools --debug)" in listed.stderr
    assert listed.stdout.startswith("no tools: no MCP server of BATON_MCP_SERVERS listed any")
    debug = baton_tools(tmp_path, "--debug", BATON_MCP_SERVERS=str(servers))
    assert debug.returncode == 1 and "INFO baton.mcp: broken: CRM_TOKEN is not set" in debug.stderr, debug.stderr
