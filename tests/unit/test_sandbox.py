"""The sandbox argv, read as data: what a command may see and touch, decided in one pure function."""

from __future__ import annotations

import pytest

from agent.tools.sandbox import ETC_FILES, HostLayout, Limits, SandboxPolicy, etc_data, host_layout, sandbox_argv

WS = "/srv/checkouts/app"
MERGED_USR = HostLayout(
    links={"/bin": "usr/bin", "/lib": "usr/lib", "/lib64": "usr/lib64", "/sbin": "usr/sbin"},
    dirs=(),
    etc=("alternatives", "ld.so.cache", "resolv.conf", "ssl/certs"),
)
FDS = {"/etc/passwd": 10, "/etc/group": 11, "/etc/hostname": 12}


def build(policy: SandboxPolicy | None = None, layout: HostLayout = MERGED_USR, **kw) -> list[str]:
    return sandbox_argv(WS, ["make", "test"], policy or SandboxPolicy(), layout, data_fds=FDS, **kw)


def bwrap_part(argv: list[str]) -> list[str]:
    """The bwrap options, between the bwrap program and the `--` before the command."""
    start = argv.index("bwrap")
    end = len(argv) - 1 - argv[::-1].index("--")
    return argv[start + 1 : end]


def pairs(options: list[str], flag: str, arity: int) -> list[tuple[str, ...]]:
    """Every occurrence of `flag` with its `arity` arguments."""
    return [tuple(options[i + 1 : i + 1 + arity]) for i, o in enumerate(options) if o == flag]


def test_limits_come_first_and_bind_everything_after():
    """prlimit wraps bwrap, so every process of the command inherits the process, memory and file limits."""
    lim = Limits(processes=64, memory_bytes=2 << 30, file_bytes=10 << 20, open_files=256)
    argv = build(SandboxPolicy(limits=lim))
    assert argv[: argv.index("bwrap")] == [
        "prlimit",
        "--nproc=64",
        f"--data={2 << 30}",
        f"--fsize={10 << 20}",
        "--nofile=256",
        "--core=0",
        "--",
    ]
    assert argv[-3:] == ["--", "make", "test"]


def test_all_namespaces_and_no_way_back_to_privilege():
    """New user, pid, net, ipc, uts namespaces; no nested user namespace; no capability; dies with the worker."""
    opts = bwrap_part(build())
    for flag in ("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"):
        assert flag in opts
    assert "--share-net" not in opts
    assert pairs(opts, "--cap-drop", 1) == [("ALL",)]
    assert pairs(opts, "--uid", 1) == [("1000",)] and pairs(opts, "--gid", 1) == [("1000",)]


def test_network_is_shared_only_when_asked():
    """BATON_SANDBOX_NETWORK=on adds --share-net, and only then the resolver and CA files."""
    off, on = bwrap_part(build()), bwrap_part(build(SandboxPolicy(network=True)))
    assert "--share-net" in on and "--share-net" not in off
    assert ("/etc/resolv.conf", "/etc/resolv.conf") in pairs(on, "--ro-bind", 2)
    assert ("/etc/resolv.conf", "/etc/resolv.conf") not in pairs(off, "--ro-bind", 2)
    assert ("/etc/ssl/certs", "/etc/ssl/certs") in pairs(on, "--ro-bind", 2)


def test_the_workspace_is_the_only_writable_bind_and_the_cwd():
    """One read-write bind (the workspace, at its own path); the system read-only; the root remounted read-only."""
    opts = bwrap_part(build())
    assert pairs(opts, "--bind", 2) == [(WS, WS)]
    assert pairs(opts, "--chdir", 1) == [(WS,)]
    assert ("/usr", "/usr") in pairs(opts, "--ro-bind", 2)
    assert pairs(opts, "--remount-ro", 1) == [("/",)]
    assert opts.index("--remount-ro") > opts.index("--bind")  # after every mount point was made


def test_system_dirs_mirror_the_host():
    """Merged /usr: /bin, /lib... are the same symlinks; on an older layout they are read-only binds."""
    links = bwrap_part(build())
    assert sorted(pairs(links, "--symlink", 2)) == [
        ("usr/bin", "/bin"),
        ("usr/lib", "/lib"),
        ("usr/lib64", "/lib64"),
        ("usr/sbin", "/sbin"),
    ]
    split = bwrap_part(build(layout=HostLayout(links={}, dirs=("/bin", "/lib"), etc=())))
    assert pairs(split, "--symlink", 2) == []
    assert {("/bin", "/bin"), ("/lib", "/lib")} <= set(pairs(split, "--ro-bind", 2))


def test_etc_is_minimal_and_synthesized():
    """Only listed safe files from the host's /etc; passwd, group and hostname come from pipes, never the host."""
    opts = bwrap_part(build())
    etc_binds = [src for src, _ in pairs(opts, "--ro-bind", 2) if src.startswith("/etc")]
    assert etc_binds == ["/etc/alternatives", "/etc/ld.so.cache"]
    data = sorted(pairs(opts, "--ro-bind-data", 2))
    assert data == [("10", "/etc/passwd"), ("11", "/etc/group"), ("12", "/etc/hostname")]
    everything = " ".join(opts)
    for secret in ("/etc/shadow", "/etc/gshadow", "/etc/ssl/private", "/root", "/home", "/run", "/var", "/sys"):
        assert secret not in everything
    assert not any(name in ("shadow", "gshadow", "sudoers") for name in ETC_FILES)


def test_synthesized_users_know_the_sandbox_uid():
    """passwd and group name the sandbox's uid, with the workspace as its home, and carry no password hash."""
    data = etc_data(SandboxPolicy(uid=1234), WS)
    assert f"baton:x:1234:1234:Baton sandbox:{WS}:/bin/sh" in data["/etc/passwd"].decode()
    assert "baton:x:1234:" in data["/etc/group"].decode()
    assert all(line.split(":")[1] == "x" for line in data["/etc/passwd"].decode().splitlines())


def test_private_proc_dev_and_small_tmp():
    """A fresh /proc (this PID namespace's), bwrap's minimal /dev, and size-capped tmpfs /tmp and /dev/shm."""
    opts = bwrap_part(build(SandboxPolicy(limits=Limits(tmp_bytes=1 << 20))))
    assert pairs(opts, "--proc", 1) == [("/proc",)] and pairs(opts, "--dev", 1) == [("/dev",)]
    sized = [(opts[i + 1], opts[i + 3]) for i, o in enumerate(opts) if o == "--size"]
    assert sorted(sized) == [(str(1 << 20), "/dev/shm"), (str(1 << 20), "/tmp")]
    assert all(opts[i + 2] == "--tmpfs" for i, o in enumerate(opts) if o == "--size")
    assert opts.index("--tmpfs") > opts.index("--dev")  # /dev/shm mounted over the new /dev, not under it


def test_environment_is_cleared_then_three_variables():
    """--clearenv, then PATH, HOME (the workspace) and LANG; nothing else is set."""
    opts = bwrap_part(build())
    assert "--clearenv" in opts
    assert opts.index("--clearenv") < opts.index("--setenv")
    assert pairs(opts, "--setenv", 2) == [("PATH", "/usr/local/bin:/usr/bin:/bin"), ("HOME", WS), ("LANG", "C.UTF-8")]


def test_run_as_drops_to_an_unprivileged_uid_before_bwrap():
    """run_as puts setpriv between prlimit and bwrap, with no supplementary groups left."""
    argv = build(SandboxPolicy(run_as=65534))
    at = argv.index("setpriv")
    assert argv[at : argv.index("bwrap")] == ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    assert argv.index("prlimit") < at
    assert "setpriv" not in build()


def test_status_fd_is_passed_when_given():
    """The JSON status fd (how the edge tells 'could not start' from 'the command failed') appears when given."""
    assert pairs(bwrap_part(build(status_fd=7)), "--json-status-fd", 1) == [("7",)]
    assert "--json-status-fd" not in build()


@pytest.mark.parametrize("workspace", ["relative/path", "/", "/usr", "/etc", "/proc", "/dev"])
def test_workspaces_that_would_expose_the_system_are_refused(workspace: str):
    """A relative path, or a workspace that is (or contains) a system directory, cannot be bound read-write."""
    with pytest.raises(ValueError):
        sandbox_argv(workspace, ["true"], SandboxPolicy(), MERGED_USR, data_fds=FDS)


def test_a_workspace_under_usr_is_allowed():
    """/usr/src/project is fine: bound read-write on top of the read-only /usr."""
    argv = sandbox_argv("/usr/src/project", ["true"], SandboxPolicy(), MERGED_USR, data_fds=FDS)
    assert ("/usr/src/project", "/usr/src/project") in pairs(bwrap_part(argv), "--bind", 2)


def test_host_layout_reads_links_dirs_and_etc(tmp_path):
    """host_layout reports symlinked and real system dirs and which safe /etc entries exist."""
    (tmp_path / "usr" / "bin").mkdir(parents=True)
    (tmp_path / "bin").symlink_to("usr/bin")
    (tmp_path / "lib").mkdir()
    (tmp_path / "etc" / "alternatives").mkdir(parents=True)
    (tmp_path / "etc" / "shadow").write_text("root:$6$hash")
    layout = host_layout(str(tmp_path))
    assert layout.links == {"/bin": "usr/bin"} and layout.dirs == ("/lib",)
    assert layout.etc == ("alternatives",)


def test_settings_choose_the_policy():
    """BATON_SANDBOX=none is the only way to no policy; the network and uid settings reach the policy."""
    from config.settings import Settings
    from tasks.execution.wiring import sandbox_policy

    assert sandbox_policy(Settings(sandbox="none")) is None
    default = sandbox_policy(Settings())
    assert default == SandboxPolicy() and not default.network and default.run_as is None
    tuned = sandbox_policy(Settings(sandbox_network="on", sandbox_uid=65534))
    assert tuned is not None and tuned.network and tuned.run_as == 65534


def test_data_files_bind_the_synthesized_etc_read_only_instead_of_fds():
    """For a launcher that cannot pass fds (the MCP SDK's): the same /etc paths from host files, read-only."""
    files = {"/etc/passwd": "/tmp/x/passwd", "/etc/group": "/tmp/x/group", "/etc/hostname": "/tmp/x/hostname"}
    opts = bwrap_part(sandbox_argv(WS, ["srv"], SandboxPolicy(), MERGED_USR, data_files=files))
    assert "--ro-bind-data" not in opts
    binds = [pair for pair in pairs(opts, "--ro-bind", 2) if pair[1] in files]
    assert sorted(binds) == sorted((host, inside) for inside, host in files.items())
    assert opts.index("--remount-ro") > max(i for i, o in enumerate(opts) if o == "--ro-bind")


def test_extra_env_joins_the_minimal_environment_after_clearenv():
    """An MCP server's `env` from the servers file is set inside, after --clearenv, over the three variables."""
    opts = bwrap_part(
        sandbox_argv(WS, ["srv"], SandboxPolicy(), MERGED_USR, data_fds=FDS, extra_env={"TOKEN": "t", "LANG": "C"})
    )
    assert opts.index("--clearenv") < opts.index("--setenv")
    assert dict(pairs(opts, "--setenv", 2)) == {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WS, "LANG": "C",
                                                 "TOKEN": "t"}
