"""The one edge that runs a model's command: in the bwrap sandbox (the default) or, set on purpose, unconfined.

`run` spawns the argv `agent.tools.sandbox.sandbox_argv` builds, reads at most a bounded amount of its output (the
rest is drained and counted, so a command printing a gigabyte costs the worker no memory), kills everything it
started when it is over or past its time limit, and refuses — running nothing — when the sandbox cannot start.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent.errors import ToolError
from agent.tools.sandbox import SandboxPolicy, etc_data, host_layout, sandbox_argv

KILL_GRACE_SECONDS = 2.0
READ_CHUNK = 65536

FIX_HINT = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), and let the worker create user namespaces "
    "(in a container: see the README's 'Sandbox' section), or set BATON_SANDBOX=none on purpose to run "
    "commands unconfined"
)

_SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|_AUTH", re.IGNORECASE)
_SECRET_NAMES = frozenset({"BATON_REDIS_URL", "BATON_BROKER_URL"})
_URL_PASSWORD = re.compile(r"://[^/@\s:]*:[^@\s]+@")  # scheme://user:pass@ (user may be empty)


class SandboxUnavailable(ToolError):
    """The sandbox could not be built; the command did not run."""


@dataclass(frozen=True)
class Completed:
    """A command that ran to its end: exit code and the head of each stream."""

    returncode: int
    stdout: bytes
    stderr: bytes
    dropped: int
    """Output bytes read past the per-stream cap and thrown away."""


def scrubbed_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The worker's environment minus anything that looks like a credential (used only unconfined).

    Unconfined, a command still reads the worker's own environment through /proc/$PPID/environ: this scrub
    keeps secrets out of the command's *own* environment and nothing more.
    """
    return {
        name: value
        for name, value in environ.items()
        if not (
            _SECRET_NAME.search(name)
            or name.upper() in _SECRET_NAMES
            or name.upper().startswith(("ANTHROPIC_", "OPENAI_"))  # the providers' keys, tokens, gateway URLs
            or _URL_PASSWORD.search(value)
        )
    }


def _kill_group(pgid: int) -> None:
    """SIGKILL a whole process group, so grandchildren (a test server, `sleep &`) die with the command."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
        os.killpg(pgid, signal.SIGKILL)


def _resolve(program: str) -> str | None:
    """`program` as the worker would find it; a bare name is looked up on the worker's PATH."""
    return program if os.sep in program else shutil.which(program)


def resolve_programs(policy: SandboxPolicy) -> SandboxPolicy:
    """The policy with bwrap, prlimit and setpriv as absolute paths; `SandboxUnavailable` names a missing one.

    Resolved here, on the worker's PATH, so the sandbox's outer processes can be started with an empty
    environment (what a command could read back through /proc/1/environ is then nothing at all).
    """

    def located(program: str) -> str:
        path = _resolve(program)
        if path is None or not os.access(path, os.X_OK):
            raise SandboxUnavailable(f"the command sandbox is unavailable: `{program}` is not installed; {FIX_HINT}")
        return path

    bwrap, prlimit = located(policy.bwrap), located(policy.prlimit)  # bwrap first: the likelier one missing
    setpriv = located(policy.setpriv) if policy.run_as is not None else policy.setpriv
    return dataclasses.replace(policy, bwrap=bwrap, prlimit=prlimit, setpriv=setpriv)


def _data_pipes(contents: Mapping[str, bytes]) -> dict[str, int]:
    """One pipe per synthesized file, filled and closed for writing; bwrap reads each to its end."""
    fds: dict[str, int] = {}
    try:
        for path, data in contents.items():
            read_end, write_end = os.pipe()
            fds[path] = read_end
            with os.fdopen(write_end, "wb") as fh:  # a few hundred bytes: far below a pipe's buffer
                fh.write(data)
    except BaseException:
        for fd in fds.values():
            os.close(fd)
        raise
    return fds


def _collect(proc: subprocess.Popen[bytes], deadline: float, cap: int) -> tuple[bytes, bytes, int, bool]:
    """Read stdout and stderr until both close or the deadline passes: (out, err, dropped, timed_out)."""
    assert proc.stdout is not None and proc.stderr is not None
    heads = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    dropped = 0
    with selectors.DefaultSelector() as sel:
        for stream in (proc.stdout, proc.stderr):
            sel.register(stream.fileno(), selectors.EVENT_READ)
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(heads[proc.stdout.fileno()]), bytes(heads[proc.stderr.fileno()]), dropped, True
            for key, _ in sel.select(timeout=min(remaining, 1.0)):
                chunk = os.read(key.fd, READ_CHUNK)
                if not chunk:
                    sel.unregister(key.fd)
                    continue
                head = heads[key.fd]
                keep = max(0, cap - len(head))
                head += chunk[:keep]
                dropped += len(chunk) - min(keep, len(chunk))
    return bytes(heads[proc.stdout.fileno()]), bytes(heads[proc.stderr.fileno()]), dropped, False


def _ran(status: bytes) -> bool:
    """Whether bwrap's JSON status reports the command's exit: only then did the sandbox come up and exec it.

    `child-pid` is written right after the namespaces are created, before the mounts; a failure setting them
    up (a missing source path, a mount the kernel refuses) or exec'ing the command leaves no `exit-code` line.
    """
    for line in status.splitlines():
        with contextlib.suppress(ValueError):
            if "exit-code" in json.loads(line):
                return True
    return False


def run(
    command: Sequence[str],
    workspace: str,
    *,
    sandbox: SandboxPolicy | None,
    timeout: float,
    output_bytes: int,
) -> Completed:
    """Run `command` (an argv) in `workspace` (a real path); `sandbox=None` runs it unconfined.

    Raises `SandboxUnavailable` when the sandbox cannot be built (nothing ran), `ToolError` for a command
    that is not found or passes `timeout` (then everything it started has been killed).
    """
    name = command[0]
    pass_fds: dict[str, int] = {}
    status_r = status_w = -1
    if sandbox is None:
        argv, env = list(command), scrubbed_env(os.environ)
    else:
        sandbox = resolve_programs(sandbox)
        if os.sep not in name and shutil.which(name, path=sandbox.path) is None:
            raise ToolError(f"command not found: {name} (the sandbox's PATH is {sandbox.path})")
        pass_fds = _data_pipes(etc_data(sandbox, workspace))
        status_r, status_w = os.pipe()
        argv = sandbox_argv(
            workspace, command, sandbox, host_layout(), data_fds=pass_fds, status_fd=status_w
        )
        env = {}  # prlimit, setpriv and bwrap need none; the command gets sandbox_env via --setenv
    try:
        try:
            proc = subprocess.Popen(
                argv,
                shell=False,
                cwd=workspace,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(*pass_fds.values(), *([status_w] if status_w >= 0 else [])),
                start_new_session=True,  # its own process group, so a timeout can kill all of it
            )
        except FileNotFoundError:
            if sandbox is not None:
                unavailable = f"the command sandbox is unavailable: cannot run {argv[0]}; {FIX_HINT}"
                raise SandboxUnavailable(unavailable) from None
            raise ToolError(f"command not found: {name}") from None
        except OSError as err:
            raise ToolError(f"cannot run {name}: {err.strerror}") from None
        except ValueError as err:  # e.g. a NUL byte in an argument
            raise ToolError(f"refused: {err}") from None
    finally:
        for fd in (*pass_fds.values(), status_w):
            if fd >= 0:
                os.close(fd)
    try:
        with proc:
            deadline = time.monotonic() + timeout
            out, err_out, dropped, timed_out = _collect(proc, deadline, output_bytes)
            if not timed_out:
                try:  # both pipes closed: the command is ending (or closed them and lingers)
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
            # Done or not: nothing it started may outlive it. Its leader is not reaped yet when it timed out,
            # so the pid still names the group; in the sandbox, bwrap's end tears down its PID namespace too.
            _kill_group(proc.pid)
            if timed_out:
                # Something that left the group may still hold the pipes; `with proc` closes them then.
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=KILL_GRACE_SECONDS)
                raise ToolError(f"timed out after {timeout:g} s; everything it started was killed")
        if sandbox is not None and not _ran(_read_all(status_r)):
            reason = err_out.decode("utf-8", errors="replace").strip() or f"exit code {proc.returncode}"
            if err_out.startswith(b"bwrap: execvp "):
                raise ToolError(f"command not found: {name} ({reason})")
            raise SandboxUnavailable(f"the command sandbox could not start ({reason[:500]}); {FIX_HINT}")
    finally:
        if status_r >= 0:
            os.close(status_r)
    return Completed(proc.returncode, out, err_out, dropped)


def _read_all(fd: int) -> bytes:
    """What is in a pipe whose writers are gone (bwrap has exited): read without blocking."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, READ_CHUNK):
            chunks.append(chunk)
    return b"".join(chunks)


def probe(policy: SandboxPolicy) -> str | None:
    """Build the sandbox once around `true`: None when it works, else the reason (the worker logs it at start)."""
    with tempfile.TemporaryDirectory(prefix="baton-sandbox-probe-") as workspace:
        real = os.path.realpath(workspace)
        if policy.run_as is not None:
            os.chown(real, policy.run_as, policy.run_as)
        try:
            done = run(["true"], real, sandbox=policy, timeout=30, output_bytes=4096)
        except ToolError as err:
            return str(err)
    if done.returncode != 0:
        return f"the command sandbox ran `true` with exit code {done.returncode}: {done.stderr[:500]!r}; {FIX_HINT}"
    return None
