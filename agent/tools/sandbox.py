"""The coding-run sandbox as data: one pure function from (workspace, command, policy, host layout) to argv.

A model chooses the commands a coding run executes, in a checkout anyone may have written into, so
`run_command` runs them under bubblewrap (`bwrap`): new user, PID, network, IPC, UTS (and cgroup) namespaces,
a fresh `/proc`, a minimal `/dev`, the system's programs read-only, a synthesized `/etc` holding no host
secret, the workspace the only writable place (and the working directory), a cleared environment. Limits on
processes, memory, file size and open files are set by util-linux's `prlimit`, which execs bwrap: resource
limits are inherited through exec and fork, so they bind everything the command starts, and setting them in
a separate program (rather than a `preexec_fn`) keeps the worker free of fork-then-run-Python hazards in a
process that has threads, and keeps every limit visible in the argv.

Everything that decides what the sandbox exposes lives in `sandbox_argv` (and the three parts it joins: the
limits, the namespaces, the filesystem), so it can be read and unit-tested in one place; `agent/tools/commands.py`
runs a model's command in it, `agent/tools/mcp/sandboxed.py` a coding run's stdio MCP server (the same sandbox,
its /etc files bound from disk since the MCP SDK passes no fds, plus the server's env).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# Top-level system directories a toolchain expects; each is a symlink into /usr on merged-/usr systems
# (Debian 12, Fedora) and a real directory on older ones. `host_layout` reads which, `sandbox_argv` mirrors it.
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# The only host files under /etc the sandbox sees: what the dynamic loader, Debian's alternatives symlinks
# (/usr/bin/awk -> /etc/alternatives/awk), locale/time and name-service lookups need. Deliberately not /etc as
# a whole: it holds /etc/shadow, /etc/ssl/private, credentials in /etc/*.conf. With a root worker the sandbox's
# user maps to host uid 0, so it would even be the owner of whatever root-only file it could see.
ETC_FILES = (
    "alternatives",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "nsswitch.conf",
    "os-release",
    "mime.types",
    "protocols",
    "services",
)
# Only with the network shared: name resolution and the public CA bundle (never /etc/ssl/private).
ETC_NETWORK_FILES = ("resolv.conf", "hosts", "host.conf", "gai.conf", "ssl/certs", "ca-certificates")

# A workspace equal to or above one of these would make the system writable (or hide /proc, /dev).
PROTECTED = ("/usr", "/etc", "/proc", "/dev", *SYSTEM_DIRS)

GiB = 1 << 30
MiB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """Per-command resource limits; each binds the command and everything it starts."""

    processes: int = 256
    """RLIMIT_NPROC: processes of the sandbox's host uid. Stops a fork bomb at this count — but the kernel
    never applies it to uid 0, so it binds only when the worker runs as non-root or `run_as` is set."""
    memory_bytes: int = 4 * GiB
    """RLIMIT_DATA per process (private writable memory): a runaway allocation fails with ENOMEM instead of
    pushing the host into OOM. Not RLIMIT_AS: runtimes reserve address space they never touch (a JVM's heap,
    V8's WebAssembly guard regions), and a 4 GiB RLIMIT_AS made `node`'s WebAssembly and `java -Xmx6g` fail."""
    file_bytes: int = 1 * GiB
    """RLIMIT_FSIZE: no single file written grows past this (the writer gets SIGXFSZ / EFBIG)."""
    open_files: int = 1024
    """RLIMIT_NOFILE per process."""
    tmp_bytes: int = 256 * MiB
    """Size of the private tmpfs at /tmp (and of /dev/shm): memory a command may park there."""


@dataclass(frozen=True)
class SandboxPolicy:
    """What a sandboxed command may reach, and the programs that build the sandbox."""

    network: bool = False
    """Share the host's network namespace (`BATON_SANDBOX_NETWORK=on`); off, only a loopback of its own."""
    limits: Limits = field(default_factory=Limits)
    bwrap: str = "bwrap"
    """bubblewrap, looked up on the worker's PATH unless a path."""
    prlimit: str = "prlimit"
    setpriv: str = "setpriv"
    run_as: int | None = None
    """Host uid (and gid) to become before bwrap, via setpriv: lets a root worker have its process limit
    enforced. The workspace must then be writable by that uid."""
    uid: int = 1000
    """The uid (and gid) the command sees inside; it owns the workspace there and holds no capability."""
    path: str = "/usr/local/bin:/usr/bin:/bin"
    lang: str = "C.UTF-8"
    hostname: str = "sandbox"


@dataclass(frozen=True)
class HostLayout:
    """The few facts about the host's root that the argv depends on (read by `host_layout`)."""

    links: Mapping[str, str]
    """System dirs that are symlinks, with their targets, e.g. {"/bin": "usr/bin"}."""
    dirs: tuple[str, ...]
    """System dirs that are real directories (bound read-only)."""
    etc: tuple[str, ...]
    """Entries of ETC_FILES and ETC_NETWORK_FILES that exist on the host."""


def host_layout(root: str = "/") -> HostLayout:
    """Read which system dirs are symlinks or directories and which safe /etc entries exist."""
    links: dict[str, str] = {}
    dirs: list[str] = []
    for name in SYSTEM_DIRS:
        host = os.path.join(root, name.lstrip("/"))
        if os.path.islink(host):
            links[name] = os.readlink(host)
        elif os.path.isdir(host):
            dirs.append(name)
    etc = tuple(n for n in (*ETC_FILES, *ETC_NETWORK_FILES) if os.path.lexists(os.path.join(root, "etc", n)))
    return HostLayout(links=links, dirs=tuple(dirs), etc=etc)


def etc_data(policy: SandboxPolicy, home: str) -> dict[str, bytes]:
    """The synthesized /etc files: one user and group for the sandbox's uid, and root (so `ls -l` has names)."""
    uid = policy.uid
    return {
        "/etc/passwd": (
            f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
            f"baton:x:{uid}:{uid}:Baton sandbox:{home}:/bin/sh\n"
            f"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ).encode(),
        "/etc/group": f"root:x:0:\nbaton:x:{uid}:\nnogroup:x:65534:\n".encode(),
        "/etc/hostname": f"{policy.hostname}\n".encode(),
    }


def sandbox_env(policy: SandboxPolicy, workspace: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment a sandboxed command starts with: a minimal PATH, HOME, LANG, then `extra` over them
    (an MCP server's `env` from the operator's file; a model's command gets none)."""
    return {"PATH": policy.path, "HOME": workspace, "LANG": policy.lang, **(extra or {})}


def sandbox_argv(
    workspace: str,
    command: Sequence[str],
    policy: SandboxPolicy,
    layout: HostLayout,
    *,
    data_fds: Mapping[str, int] | None = None,
    data_files: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    status_fd: int | None = None,
) -> list[str]:
    """The full command line: prlimit, optionally setpriv, then bwrap with the sandbox, then the command.

    `workspace` is the real (resolved) path; it is bound read-write at the same path, so paths in a command's
    output match what the file tools show. Each path of `etc_data` comes in one of two ways: `data_fds` maps it to
    a readable fd holding its bytes (the caller makes the pipes: nothing is left on disk), `data_files` to a host
    file holding them, bound read-only (for a launcher that cannot hand fds on, as the MCP SDK's stdio client
    cannot). `extra_env` goes into the environment over `sandbox_env`'s. `status_fd` gets bwrap's JSON status (a
    `child-pid` line once the sandbox is up, which is how the caller tells "the sandbox could not start" from
    "the command failed").
    """
    if not os.path.isabs(workspace):
        raise ValueError(f"the workspace must be an absolute path, got {workspace!r}")
    if any(os.path.commonpath([workspace, system]) == workspace for system in PROTECTED):
        raise ValueError(f"the workspace {workspace!r} is or contains a system directory; it cannot be bound writable")
    argv = _limits_argv(policy)
    if policy.run_as is not None:
        # setpriv drops to that uid/gid with no supplementary groups; bwrap then runs unprivileged.
        argv += [policy.setpriv, f"--reuid={policy.run_as}", f"--regid={policy.run_as}", "--clear-groups", "--"]
    argv += _namespaces_argv(policy, status_fd)
    argv += _filesystem_argv(workspace, policy, layout, data_fds or {}, data_files or {})
    argv.append("--clearenv")
    for name, value in sandbox_env(policy, workspace, extra_env).items():
        argv += ["--setenv", name, value]
    argv += ["--", *command]
    return argv


def _limits_argv(policy: SandboxPolicy) -> list[str]:
    """prlimit with the policy's limits, which bind everything the command starts (inherited through exec)."""
    lim = policy.limits
    return [
        policy.prlimit,
        f"--nproc={lim.processes}",
        f"--data={lim.memory_bytes}",
        f"--fsize={lim.file_bytes}",
        f"--nofile={lim.open_files}",
        "--core=0",  # a crashing program must not drop a memory image (which may hold file contents) anywhere
        "--",
    ]


def _namespaces_argv(policy: SandboxPolicy, status_fd: int | None) -> list[str]:
    """bwrap and who the command is inside: new namespaces, no capability, no way back to one, no terminal."""
    argv = [
        policy.bwrap,
        "--unshare-all",  # user, ipc, pid, net, uts, cgroup
        "--unshare-user",  # as root, --unshare-all only *tries* a user namespace; we require one
        *(["--share-net"] if policy.network else []),
        "--disable-userns",  # no nested user namespace: no way back to a full set of capabilities inside
        "--die-with-parent",  # the worker dies -> the sandbox dies, whatever the command did
        "--new-session",  # no controlling terminal to push input into (TIOCSTI)
        "--cap-drop",
        "ALL",
        "--uid",
        str(policy.uid),
        "--gid",
        str(policy.uid),
        "--hostname",
        policy.hostname,
    ]
    if status_fd is not None:
        argv += ["--json-status-fd", str(status_fd)]
    return argv


def _filesystem_argv(
    workspace: str,
    policy: SandboxPolicy,
    layout: HostLayout,
    data_fds: Mapping[str, int],
    data_files: Mapping[str, str],
) -> list[str]:
    """What the command sees of the filesystem: the system read-only, a private /tmp, a synthesized /etc, and the
    workspace, the only writable place and the working directory."""
    lim = policy.limits
    argv = ["--ro-bind", "/usr", "/usr"]
    for name, target in sorted(layout.links.items()):
        argv += ["--symlink", target, name]
    for name in layout.dirs:
        argv += ["--ro-bind", name, name]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    argv += ["--size", str(lim.tmp_bytes), "--tmpfs", "/dev/shm"]
    argv += ["--size", str(lim.tmp_bytes), "--tmpfs", "/tmp"]
    argv += ["--dir", "/etc"]  # 0755, so a program running as another uid (setuid-less tools) can read it
    network_only = set(ETC_NETWORK_FILES)
    for name in layout.etc:
        if name in network_only and not policy.network:
            continue
        argv += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    for path, fd in sorted(data_fds.items()):
        argv += ["--ro-bind-data", str(fd), path]
    for path, host_file in sorted(data_files.items()):
        argv += ["--ro-bind", host_file, path]
    argv += ["--bind", workspace, workspace, "--chdir", workspace]
    argv += ["--remount-ro", "/"]  # the root tmpfs bwrap builds: no RAM-backed writes outside /tmp
    return argv
