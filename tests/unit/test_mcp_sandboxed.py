"""A coding run's stdio MCP server in the run's sandbox: its argv from the same policy as `run_command`'s."""

from __future__ import annotations

import os
from pathlib import Path
from types import MappingProxyType

import pytest

from agent.errors import ToolError
from agent.tools.mcp.config import ServerSpec
from agent.tools.mcp.sandboxed import RunLauncher, sandboxed_argv
from agent.tools.sandbox import SandboxPolicy, sandbox_argv
from tests.unit.test_sandbox import MERGED_USR, WS, bwrap_part, pairs

SPEC = ServerSpec(name="gh", command="node", args=("server.js", "--stdio"), env=MappingProxyType({"TOKEN": "t"}))
FILES = {"/etc/passwd": "/run/x/passwd", "/etc/group": "/run/x/group", "/etc/hostname": "/run/x/hostname"}


def test_the_server_runs_under_the_run_commands_sandbox_with_its_env():
    """The argv is `env -i` then exactly the sandbox `run_command` gets, around the server's command, plus its env."""
    policy = SandboxPolicy(network=False, run_as=65534)
    argv = sandboxed_argv(SPEC, WS, policy, MERGED_USR, etc_files=FILES, env_program="/usr/bin/env")
    assert argv[:2] == ["/usr/bin/env", "-i"]  # prlimit and bwrap start with nothing: /proc/1/environ is empty
    same = sandbox_argv(WS, ["node", "server.js", "--stdio"], policy, MERGED_USR, data_files=FILES, extra_env=SPEC.env)
    assert argv[2:] == same
    opts = bwrap_part(argv)
    assert "--share-net" not in opts and pairs(opts, "--chdir", 1) == [(WS,)]
    assert dict(pairs(opts, "--setenv", 2)) == {"PATH": policy.path, "HOME": WS, "LANG": policy.lang, "TOKEN": "t"}
    assert argv[-4:] == ["--", "node", "server.js", "--stdio"]


def test_an_http_server_has_no_sandboxed_argv():
    with pytest.raises(ValueError, match="not a stdio server"):
        sandboxed_argv(ServerSpec(name="web", url="http://h/mcp"), WS, SandboxPolicy(), MERGED_USR,
                       etc_files=FILES, env_program="env")


def test_the_launcher_gives_the_sdk_its_workspace_as_cwd_and_cleans_its_files(tmp_path):
    """The SDK's parameters: `env` first, cwd the workspace; the /etc files exist while the run's servers may start
    and are removed on close. A command not on the sandbox's PATH is refused before anything starts."""
    launcher = RunLauncher(str(tmp_path), SandboxPolicy())
    params = launcher(ServerSpec(name="s", command="sh", args=("-c", "true")))
    assert os.path.basename(params.command) == "env" and params.args[0] == "-i"
    assert str(params.cwd) == os.path.realpath(tmp_path) and params.env == {}
    bound = [params.args[i + 1] for i, a in enumerate(params.args) if a == "--ro-bind" and
             params.args[i + 2] == "/etc/passwd"]
    assert len(bound) == 1 and "baton:x:1000" in Path(bound[0]).read_text()
    with pytest.raises(ToolError, match="command not found in the run's sandbox: no-such-mcp-server"):
        launcher(ServerSpec(name="s", command="no-such-mcp-server"))
    launcher.close()
    assert not os.path.exists(bound[0])
