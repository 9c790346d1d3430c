"""A coding run's stdio MCP servers inside the run's sandbox: the same policy as `run_command`, started per run.

A stdio server in a coding run works on the run's checkout, which anyone may have written into, and a model
chooses its arguments: it is confined exactly as a model's command is (`agent.tools.sandbox.sandbox_argv`: its own
namespaces, no network unless `BATON_SANDBOX_NETWORK=on`, the workspace the only writable place and its working
directory, no host process visible). Its environment is the sandbox's minimal one (`PATH`, `HOME` in the
workspace, `LANG`) plus the `env` the servers file gives it; never the worker's.

Two differences from `run_command`, both forced by the `mcp` SDK's stdio client, which spawns the program it is
given with the SDK's default environment and passes no file descriptors:
- the synthesized `/etc/passwd`, `group` and `hostname` are host files (a directory of this run's, removed when
  its servers stop) bound read-only, not pipes;
- the argv starts with `env -i`, so prlimit and bwrap (whose `/proc/1/environ` the server could read) start
  with an empty environment, as `run_command`'s do.

`sandboxed_argv` decides; `RunLauncher` is the edge that writes the files and hands the SDK its parameters.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

from agent.errors import ToolError
from agent.tools.commands import resolve_programs
from agent.tools.mcp.config import ServerSpec
from agent.tools.sandbox import HostLayout, SandboxPolicy, etc_data, host_layout, sandbox_argv


def sandboxed_argv(
    spec: ServerSpec,
    workspace: str,
    policy: SandboxPolicy,
    layout: HostLayout,
    *,
    etc_files: Mapping[str, str],
    env_program: str,
) -> list[str]:
    """The whole command line of `spec`'s server in the sandbox of `workspace` (pure).

    `etc_files` maps each path of `etc_data` to the host file holding it; `env_program` is `env`'s absolute path.
    """
    if spec.command is None:
        raise ValueError(f"server {spec.name!r} is not a stdio server")
    inner = sandbox_argv(
        workspace, [spec.command, *spec.args], policy, layout, data_files=etc_files, extra_env=spec.env
    )
    return [env_program, "-i", *inner]


def inside_path(spec: ServerSpec, policy: SandboxPolicy) -> str:
    """The PATH the server's command is looked up on inside the sandbox (the file's `env` may set its own)."""
    return spec.env.get("PATH", policy.path)


class RunLauncher:
    """Launches one coding run's stdio servers in its sandbox; `close` removes the files it wrote for them."""

    def __init__(self, workspace: str, policy: SandboxPolicy) -> None:
        self.workspace = os.path.realpath(workspace)
        self.policy = policy
        self._etc_dir: str | None = None
        self._lock = threading.Lock()

    def __call__(self, spec: ServerSpec) -> Any:
        """The SDK's parameters for `spec`'s server; raises ToolError (the server is then unavailable) when the
        sandbox cannot be built or the command is not there inside it."""
        from mcp.client.stdio import StdioServerParameters  # the SDK's import is slow; only a worker's run pays

        policy = resolve_programs(self.policy)  # SandboxUnavailable (a ToolError) names what is missing
        env_program = shutil.which("env")
        if env_program is None:
            raise ToolError("the sandbox for MCP servers is unavailable: `env` (coreutils) is not installed")
        command = spec.command or ""
        path = inside_path(spec, policy)
        if os.sep not in command and shutil.which(command, path=path) is None:
            raise ToolError(f"command not found in the run's sandbox: {command} (its PATH is {path})")
        argv = sandboxed_argv(
            spec, self.workspace, policy, host_layout(), etc_files=self._etc_files(), env_program=env_program
        )
        return StdioServerParameters(command=argv[0], args=argv[1:], env={}, cwd=self.workspace)

    def _etc_files(self) -> dict[str, str]:
        """This run's synthesized /etc files, written once (readable by a `run_as` uid: nothing in them is secret)."""
        with self._lock:
            if self._etc_dir is None:
                self._etc_dir = tempfile.mkdtemp(prefix="baton-mcp-etc-")
                os.chmod(self._etc_dir, 0o755)
            files = {}
            for path, data in etc_data(self.policy, self.workspace).items():
                host = os.path.join(self._etc_dir, os.path.basename(path))
                if not os.path.exists(host):
                    with open(host, "wb") as fh:
                        fh.write(data)
                    os.chmod(host, 0o644)
                files[path] = host
            return files

    def close(self) -> None:
        with self._lock:
            if self._etc_dir is not None:
                shutil.rmtree(self._etc_dir, ignore_errors=True)
                self._etc_dir = None
