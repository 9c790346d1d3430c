"""Workspace tools for coding runs: read, write and list files under one root, and run commands there.

The file tools are confined: every path a model gives is resolved (symlinks included) against the workspace
root and refused unless it stays inside, because a model's path is untrusted input and one `../` or one
planted symlink would otherwise let a run read the worker's secrets or overwrite files outside its checkout.
`run_command` runs without a shell, inside the bubblewrap sandbox of `agent.tools.sandbox` (see `agent.tools.commands`):
a command sees the workspace as the only writable place, no network, no host process, no secret. The file
tools run in the worker itself, so their path confinement stays the guard even against a symlink a
sandboxed command planted.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from agent.errors import ToolError
from agent.tools import Tool, cap_result, commands, tool
from agent.tools.commands import scrubbed_env as scrubbed_env  # re-exported: it lived here before the sandbox
from agent.tools.sandbox import SandboxPolicy

MAX_READ_BYTES = 1_000_000
LIST_LIMIT = 1_000
DEFAULT_SANDBOX = SandboxPolicy()


class Workspace:
    """One workspace root and the confined file operations the tools run on it.

    The root is resolved once, here, so a symlinked checkout path is compared in its real form.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.realpath(root))
        if not self.root.is_dir():
            raise ValueError(f"workspace root {os.fspath(root)!r} is not a directory")

    def rel(self, p: Path) -> str:
        return p.relative_to(self.root).as_posix() or "."

    def confine(self, path: str) -> Path:
        """Resolve a model-supplied path to its real location, refusing anything that leaves the root.

        `realpath` follows every symlink on the way (parents and the final component, dangling ones too)
        and folds `..` the way the kernel would, so the check sees where an open would really land.
        Nothing is touched before this check passes.
        """
        if "\x00" in path:
            raise ToolError("refused: the path contains a NUL byte")
        if os.path.isabs(path):
            raise ToolError(f"refused: {path!r} is absolute; give a path relative to the workspace root")
        joined = self.root / path
        real = Path(os.path.realpath(joined))
        if not real.is_relative_to(self.root):
            lexical = Path(os.path.normpath(joined))
            how = "through a symlink" if lexical.is_relative_to(self.root) else "with '..'"
            raise ToolError(f"refused: {path!r} leads outside the workspace ({how})")
        return real

    def read(self, path: str) -> str:
        target = self.confine(path)
        try:
            # O_NOFOLLOW: a symlink swapped in after the check is refused, not followed; O_NONBLOCK: a FIFO
            # cannot hang the worker. fstat on the open fd checks the very file we will read.
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            raise ToolError(f"no such file: {path}") from None
        except OSError as err:
            raise ToolError(f"cannot read {path}: {err.strerror}") from None
        try:
            data = _read_regular(fd, path)
        finally:
            os.close(fd)
        return data.decode("utf-8", errors="replace")

    def write(self, path: str, content: str) -> str:
        target = self.confine(path)  # resolves the nearest existing ancestor too, before any mkdir
        if target == self.root:
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
        return f"wrote {len(data)} bytes to {self.rel(target)}"

    def listing(self, path: str) -> str:
        base = self.confine(path)
        if not base.is_dir():
            raise ToolError(f"{path} is not a directory" if base.exists() else f"no such directory: {path}")
        lines: list[str] = []
        stack = [iter(_entries(os.fspath(base)))]  # explicit stack: deep trees must not hit recursion limits
        while stack and len(lines) <= LIST_LIMIT:
            entry = next(stack[-1], None)
            if entry is None:
                stack.pop()
                continue
            name = Path(entry.path).relative_to(self.root).as_posix()
            if entry.is_symlink():
                lines.append(name + "@")
            elif entry.is_dir():
                lines.append(name + "/")
                if entry.name != ".git":
                    stack.append(iter(_entries(entry.path)))
            else:
                lines.append(name)
        if len(lines) > LIST_LIMIT:
            lines = [*lines[:LIST_LIMIT], f"[… listing cut at {LIST_LIMIT} entries]"]
        return "\n".join(lines) if lines else f"({self.rel(base)} is empty)"


def _read_regular(fd: int, path: str) -> bytes:
    """The bytes of the open file `fd`, refused unless it is a regular file within the read limit."""
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
    if size > MAX_READ_BYTES:  # it grew while we read
        raise ToolError(f"{path} is over the {MAX_READ_BYTES}-byte read limit")
    return b"".join(chunks)


def _entries(directory: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return []  # unreadable subdirectory: list what we can


def _run(
    command: str, root: Path, sandbox: SandboxPolicy | None, timeout: float, output_bytes: int, output_cap: int
) -> str:
    """`run_command`'s work: split the line (no shell), run it in the sandbox, report its code and output."""
    try:
        argv = shlex.split(command)
    except ValueError as err:
        raise ToolError(f"refused: cannot split the command line: {err}") from None
    if not argv:
        raise ToolError("refused: the command is empty")
    try:
        done = commands.run(argv, os.fspath(root), sandbox=sandbox, timeout=timeout, output_bytes=output_bytes)
    except commands.SandboxUnavailable:
        raise
    except ToolError as err:
        if "timed out" in str(err):
            raise ToolError(f"`{command}` {err}") from None
        raise
    parts = [f"exit code {done.returncode}"]
    for label, stream in (("stdout", done.stdout), ("stderr", done.stderr)):
        if stream:
            parts.append(f"--- {label} ---\n{stream.decode('utf-8', errors='replace')}")
    if done.dropped:
        parts.append(f"[… {done.dropped} more bytes of output were discarded]")
    return cap_result("\n".join(parts), output_cap)


def workspace_tools(
    root: str | os.PathLike[str],
    *,
    command_timeout: float = 60.0,
    output_cap: int = 16_000,
    sandbox: SandboxPolicy | None = DEFAULT_SANDBOX,
) -> list[Tool]:
    """Build `read_file`, `write_file`, `list_files` and `run_command` bound to one workspace root.

    `sandbox` is the policy `run_command` runs under; None (`BATON_SANDBOX=none`) runs commands unconfined, on
    purpose. The tools' docstrings are what the model reads of them.
    """
    output_bytes = max(4 * output_cap, 65536)  # bytes read per stream; the text is cut to output_cap after
    space = Workspace(root)

    @tool(effect="read", name="read_file")
    def read_file(path: str) -> str:
        """Read a text file from the workspace (UTF-8; undecodable bytes are replaced). Files over 1 MB are
        refused. `path` is relative to the workspace root."""
        return space.read(path)

    @tool(effect="write", name="write_file", idempotent=True)
    def write_file(path: str, content: str) -> str:
        """Write `content` (UTF-8) to a file in the workspace, replacing it if it exists and creating missing
        parent directories. `path` is relative to the workspace root."""
        return space.write(path, content)

    @tool(effect="read", name="list_files")
    def list_files(path: str = ".") -> str:
        """List a workspace directory recursively, sorted, as paths relative to the workspace root.
        Directories end in `/`, symlinks in `@` (not descended). `.git` is shown but not descended unless
        asked for. Long listings are cut."""
        return space.listing(path)

    @tool(effect="write", name="run_command")
    def run_command(command: str) -> str:
        """Run a command in the workspace root and return its exit code, stdout and stderr. The line is split
        like a shell would split words, but NO shell runs it: `;`, `&&`, pipes, redirects and `$VAR` are
        passed through literally (use `sh -c '...'` when you need them). It runs in a sandbox: the workspace is
        the only writable place (HOME is the workspace, /tmp is private and small), there is no network, no
        other process is visible and the environment holds only PATH, HOME and LANG. It is killed after a
        time limit, and with everything it started when it ends."""
        return _run(command, space.root, sandbox, command_timeout, output_bytes, output_cap)

    return [read_file, write_file, list_files, run_command]
