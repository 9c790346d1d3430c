"""Workspace tools for coding runs: read, write and list files under one root, and run commands there.

The file tools are confined: every path a model gives is resolved (symlinks included) against the workspace
root and refused unless it stays inside, because a model's path is untrusted input and one `../` or one
planted symlink would otherwise let a run read the worker's secrets or overwrite files outside its checkout.
`run_command` is NOT a sandbox: it runs in the root with secrets scrubbed from its environment and without a
shell, but the program itself can touch anything the worker can. Real isolation of commands is the job of
the container or user the worker runs as.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path

from agent.errors import ToolError
from agent.tools import Tool, cap_result, tool

MAX_READ_BYTES = 1_000_000
LIST_LIMIT = 1_000
KILL_GRACE_SECONDS = 2.0

_SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|_AUTH", re.IGNORECASE)
_SECRET_NAMES = frozenset({"BATON_REDIS_URL", "BATON_BROKER_URL"})
_URL_PASSWORD = re.compile(r"://[^/@\s:]*:[^@\s]+@")  # scheme://user:pass@ (user may be empty)


def scrubbed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment minus anything that looks like a credential.

    A command the model chooses must not be able to print the API key or the Redis password into a
    tool_result (which goes back to the provider and into logs), so names and values that look secret go.
    Erring on the side of dropping is deliberate: a missing variable fails loudly, a leaked one does not.
    """
    return {
        name: value
        for name, value in environ.items()
        if not (
            _SECRET_NAME.search(name)
            or name.upper() in _SECRET_NAMES
            or name.upper().startswith("ANTHROPIC_")
            or _URL_PASSWORD.search(value)
        )
    }


def _kill_group(pgid: int) -> None:
    """SIGKILL a whole process group, so grandchildren (a test server, `sleep &`) die with the command."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
        os.killpg(pgid, signal.SIGKILL)


def workspace_tools(
    root: str | os.PathLike[str], *, command_timeout: float = 60.0, output_cap: int = 16_000
) -> list[Tool]:
    """Build `read_file`, `write_file`, `list_files` and `run_command` bound to one workspace root.

    The root is resolved once, here, so a symlinked checkout path is compared in its real form.
    """
    root_real = Path(os.path.realpath(root))
    if not root_real.is_dir():
        raise ValueError(f"workspace root {os.fspath(root)!r} is not a directory")

    def rel(p: Path) -> str:
        return p.relative_to(root_real).as_posix() or "."

    def confine(path: str) -> Path:
        """Resolve a model-supplied path to its real location, refusing anything that leaves the root.

        `realpath` follows every symlink on the way (parents and the final component, dangling ones too)
        and folds `..` the way the kernel would, so the check sees where an open would really land.
        Nothing is touched before this check passes.
        """
        if "\x00" in path:
            raise ToolError("refused: the path contains a NUL byte")
        if os.path.isabs(path):
            raise ToolError(f"refused: {path!r} is absolute; give a path relative to the workspace root")
        joined = root_real / path
        real = Path(os.path.realpath(joined))
        if not real.is_relative_to(root_real):
            lexical = Path(os.path.normpath(joined))
            how = "through a symlink" if lexical.is_relative_to(root_real) else "with '..'"
            raise ToolError(f"refused: {path!r} leads outside the workspace ({how})")
        return real

    @tool(effect="read", name="read_file")
    def read_file(path: str) -> str:
        """Read a text file from the workspace (UTF-8; undecodable bytes are replaced). Files over 1 MB are
        refused. `path` is relative to the workspace root."""
        target = confine(path)
        try:
            # O_NOFOLLOW: a symlink swapped in after the check is refused, not followed; O_NONBLOCK: a FIFO
            # cannot hang the worker. fstat on the open fd checks the very file we will read.
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ToolError(f"no such file: {path}") from None
        except OSError as err:
            raise ToolError(f"cannot read {path}: {err.strerror}") from None
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise ToolError(f"{path} is a directory; use list_files to see what is in it")
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f"{path} is not a regular file")
            if info.st_size > MAX_READ_BYTES:
                raise ToolError(f"{path} is {info.st_size} bytes, over the {MAX_READ_BYTES}-byte read limit")
            chunks: list[bytes] = []
            size = 0
            while size <= MAX_READ_BYTES and (chunk := os.read(fd, MAX_READ_BYTES + 1 - size)):
                chunks.append(chunk)
                size += len(chunk)
            data = b"".join(chunks)
        finally:
            os.close(fd)
        if len(data) > MAX_READ_BYTES:  # it grew while we read
            raise ToolError(f"{path} is over the {MAX_READ_BYTES}-byte read limit")
        return data.decode("utf-8", errors="replace")

    @tool(effect="write", name="write_file", idempotent=True)
    def write_file(path: str, content: str) -> str:
        """Write `content` (UTF-8) to a file in the workspace, replacing it if it exists and creating missing
        parent directories. `path` is relative to the workspace root."""
        target = confine(path)  # resolves the nearest existing ancestor too, before any mkdir
        if target == root_real:
            raise ToolError("refused: the workspace root is a directory, not a file")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ToolError(f"cannot create the directories for {path}: {err.strerror}") from None
        if Path(os.path.realpath(target.parent)) != target.parent:
            raise ToolError(f"refused: a parent of {path!r} changed into a symlink while writing")
        data = content.encode("utf-8", errors="replace")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(target, flags, 0o666)
        except IsADirectoryError:
            raise ToolError(f"{path} is a directory") from None
        except OSError as err:
            raise ToolError(f"cannot write {path}: {err.strerror}") from None
        with os.fdopen(fd, "wb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ToolError(f"{path} is not a regular file")
            fh.write(data)
        return f"wrote {len(data)} bytes to {rel(target)}"

    @tool(effect="read", name="list_files")
    def list_files(path: str = ".") -> str:
        """List a workspace directory recursively, sorted, as paths relative to the workspace root.
        Directories end in `/`, symlinks in `@` (not descended). `.git` is shown but not descended unless
        asked for. Long listings are cut."""
        base = confine(path)
        if not base.is_dir():
            raise ToolError(f"{path} is not a directory" if base.exists() else f"no such directory: {path}")

        def entries(directory: str) -> list[os.DirEntry[str]]:
            try:
                with os.scandir(directory) as it:
                    return sorted(it, key=lambda e: e.name)
            except OSError:
                return []  # unreadable subdirectory: list what we can

        lines: list[str] = []
        stack = [iter(entries(os.fspath(base)))]  # explicit stack: deep trees must not hit recursion limits
        while stack and len(lines) <= LIST_LIMIT:
            entry = next(stack[-1], None)
            if entry is None:
                stack.pop()
                continue
            name = Path(entry.path).relative_to(root_real).as_posix()
            if entry.is_symlink():
                lines.append(name + "@")
            elif entry.is_dir():
                lines.append(name + "/")
                if entry.name != ".git":
                    stack.append(iter(entries(entry.path)))
            else:
                lines.append(name)
        if len(lines) > LIST_LIMIT:
            lines = [*lines[:LIST_LIMIT], f"[… listing cut at {LIST_LIMIT} entries]"]
        return "\n".join(lines) if lines else f"({rel(base)} is empty)"

    @tool(effect="write", name="run_command")
    def run_command(command: str) -> str:
        """Run a command in the workspace root and return its exit code, stdout and stderr. The line is split
        like a shell would split words, but NO shell runs it: `;`, `&&`, pipes, redirects and `$VAR` are
        passed through literally (use `sh -c '...'` when you need them). Secrets are not in its environment.
        It is killed after a time limit."""
        try:
            argv = shlex.split(command)
        except ValueError as err:
            raise ToolError(f"refused: cannot split the command line: {err}") from None
        if not argv:
            raise ToolError("refused: the command is empty")
        try:
            proc = subprocess.Popen(
                argv,
                shell=False,
                cwd=root_real,
                env=scrubbed_env(os.environ),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group, so a timeout can kill all of it
            )
        except FileNotFoundError:
            raise ToolError(f"command not found: {argv[0]}") from None
        except OSError as err:
            raise ToolError(f"cannot run {argv[0]}: {err.strerror}") from None
        except ValueError as err:  # e.g. a NUL byte in an argument
            raise ToolError(f"refused: {err}") from None
        with proc:
            try:
                out, err_out = proc.communicate(timeout=command_timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)  # the leader is not reaped yet, so its pid still names the group
                # Something that left the group may still hold the pipes; `with proc` closes them then.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.communicate(timeout=KILL_GRACE_SECONDS)
                raise ToolError(
                    f"`{command}` timed out after {command_timeout:g} s; its process group was killed"
                ) from None
            _kill_group(proc.pid)  # background children must not outlive the command on the worker
        parts = [f"exit code {proc.returncode}"]
        for label, stream in (("stdout", out), ("stderr", err_out)):
            if stream:
                parts.append(f"--- {label} ---\n{stream.decode('utf-8', errors='replace')}")
        return cap_result("\n".join(parts), output_cap)

    return [read_file, write_file, list_files, run_command]
