"""The workspace tools: confinement of file paths, and how run_command runs (no shell, no secrets, killed)."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import pytest

from agent.tools import ToolOutcome, execute, workspace
from agent.tools.workspace import workspace_tools


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("top secret")
    return out


def call(root: Path, name: str, args: dict, **kwargs) -> ToolOutcome:
    tools = {t.name: t for t in workspace_tools(root, **kwargs)}
    return execute(tools[name], args)


def assert_refused(outcome: ToolOutcome, *fragments: str) -> None:
    assert outcome.is_error, outcome.content
    for fragment in fragments:
        assert fragment in outcome.content


def test_tool_metadata():
    """The four tools carry the effects and idempotency the loop relies on; list_files' path is optional."""
    tools = {t.name: t for t in workspace_tools(".")}
    assert set(tools) == {"read_file", "write_file", "list_files", "run_command"}
    assert (tools["read_file"].effect, tools["list_files"].effect) == ("read", "read")
    assert tools["write_file"].effect == "write" and tools["write_file"].idempotent
    assert tools["run_command"].effect == "write" and not tools["run_command"].idempotent
    assert "required" not in tools["list_files"].input_schema
    assert tools["write_file"].input_schema["required"] == ["path", "content"]


def test_root_must_be_a_directory(tmp_path: Path):
    """A missing root is a setup mistake caught when the tools are built, not on the first call."""
    with pytest.raises(ValueError):
        workspace_tools(tmp_path / "missing")


def test_write_then_read_round_trip(ws: Path):
    """What write_file writes, read_file returns, and the result names the byte count and relative path."""
    wrote = call(ws, "write_file", {"path": "a.py", "content": "print('hé')\n"})
    assert wrote == ToolOutcome("wrote 13 bytes to a.py")
    assert call(ws, "read_file", {"path": "a.py"}) == ToolOutcome("print('hé')\n")
    again = call(ws, "write_file", {"path": "a.py", "content": "x"})
    assert not again.is_error and (ws / "a.py").read_text() == "x"


def test_write_creates_nested_directories(ws: Path):
    """Missing parent directories inside the workspace are created."""
    outcome = call(ws, "write_file", {"path": "src/pkg/mod.py", "content": "pass\n"})
    assert outcome == ToolOutcome("wrote 5 bytes to src/pkg/mod.py")
    assert (ws / "src" / "pkg" / "mod.py").read_text() == "pass\n"


def test_write_refuses_directories_and_file_parents(ws: Path):
    """write_file will not replace a directory or the root, nor treat a file as a parent directory."""
    (ws / "d").mkdir()
    (ws / "f").write_text("keep")
    assert_refused(call(ws, "write_file", {"path": "d", "content": "x"}), "is a directory")
    assert_refused(call(ws, "write_file", {"path": ".", "content": "x"}), "workspace root")
    assert_refused(call(ws, "write_file", {"path": "f/g.txt", "content": "x"}), "cannot create the directories")
    assert (ws / "f").read_text() == "keep"


def test_read_replaces_undecodable_bytes(ws: Path):
    """Binary junk does not make read_file fail; bad bytes become U+FFFD."""
    (ws / "b.bin").write_bytes(b"ok\xff\xfe")
    assert call(ws, "read_file", {"path": "b.bin"}).content == "ok\ufffd\ufffd"


def test_read_refuses_missing_directory_and_large_files(ws: Path):
    """read_file says why it will not read: no such file, a directory, or over the 1 MB limit."""
    (ws / "d").mkdir()
    (ws / "big.txt").write_bytes(b"x" * (workspace.MAX_READ_BYTES + 1))
    (ws / "limit.txt").write_bytes(b"y" * workspace.MAX_READ_BYTES)
    read_file = next(t for t in workspace_tools(ws) if t.name == "read_file")
    assert len(read_file(path="limit.txt")) == workspace.MAX_READ_BYTES  # execute() then caps it for the prompt
    assert_refused(call(ws, "read_file", {"path": "nope.txt"}), "no such file")
    assert_refused(call(ws, "read_file", {"path": "d"}), "is a directory")
    assert_refused(call(ws, "read_file", {"path": "big.txt"}), "over the 1000000-byte read limit")


def test_read_refuses_a_fifo_without_hanging(ws: Path):
    """A named pipe in the workspace is refused instead of blocking the worker on open."""
    os.mkfifo(ws / "pipe")
    assert_refused(call(ws, "read_file", {"path": "pipe"}), "not a regular file")


def test_list_files_is_sorted_recursive_and_marks_dirs_and_links(ws: Path):
    """list_files shows root-relative sorted paths, dirs with '/', symlinks with '@', .git not descended."""
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "m.py").write_text("")
    (ws / "src" / "a.py").write_text("")
    (ws / "README").write_text("")
    (ws / ".git").mkdir()
    (ws / ".git" / "HEAD").write_text("")
    (ws / "link").symlink_to(ws / "src")
    listing = call(ws, "list_files", {})
    assert listing == ToolOutcome(".git/\nREADME\nlink@\nsrc/\nsrc/a.py\nsrc/pkg/\nsrc/pkg/m.py")
    assert call(ws, "list_files", {"path": "src/pkg"}).content == "src/pkg/m.py"
    assert call(ws, "list_files", {"path": ".git"}).content == ".git/HEAD"


def test_list_files_is_capped_and_refuses_non_directories(ws: Path, monkeypatch: pytest.MonkeyPatch):
    """A long listing is cut at LIST_LIMIT with a note; a file or missing path is refused."""
    monkeypatch.setattr(workspace, "LIST_LIMIT", 3)
    for i in range(5):
        (ws / f"f{i}").write_text("")
    assert call(ws, "list_files", {}).content == "f0\nf1\nf2\n[… listing cut at 3 entries]"
    assert_refused(call(ws, "list_files", {"path": "f0"}), "not a directory")
    assert_refused(call(ws, "list_files", {"path": "gone"}), "no such directory")
    (ws / "empty").mkdir()
    assert call(ws, "list_files", {"path": "empty"}).content == "(empty is empty)"


@pytest.mark.parametrize("path", ["../x", "a/../../x", "../ws-sibling/x", "/etc/passwd", "{outside}/x"])
def test_paths_that_leave_the_root_are_refused(ws: Path, path: str):
    """Absolute paths and '..' escapes are refused by every file tool, and nothing is created outside."""
    path = path.format(outside=ws.parent)
    before = sorted(ws.parent.iterdir())
    assert_refused(call(ws, "read_file", {"path": path}), "refused")
    assert_refused(call(ws, "write_file", {"path": path, "content": "x"}), "refused")
    assert_refused(call(ws, "list_files", {"path": path}), "refused")
    assert sorted(ws.parent.iterdir()) == before


def test_absolute_path_is_refused_even_inside_the_root(ws: Path):
    """Absolute paths are refused outright, so the model learns to use workspace-relative paths."""
    (ws / "f").write_text("x")
    assert_refused(call(ws, "read_file", {"path": str(ws / "f")}), "is absolute")


def test_dotdot_that_stays_inside_is_allowed(ws: Path):
    """'..' is only a problem when it leaves the root: 'a/../b.txt' is just 'b.txt'."""
    assert call(ws, "write_file", {"path": "a/../b.txt", "content": "ok"}).content == "wrote 2 bytes to b.txt"


def test_nul_byte_is_refused(ws: Path):
    """A NUL byte in a path is refused with a clear reason rather than an OS error."""
    assert_refused(call(ws, "read_file", {"path": "a\x00b"}), "NUL byte")
    assert_refused(call(ws, "write_file", {"path": "a\x00b", "content": "x"}), "NUL byte")


def test_symlink_to_outside_directory_is_refused(ws: Path):
    """A symlink to /etc is refused whether used as a directory, as a file, or as a write target's parent."""
    (ws / "etc").symlink_to("/etc")
    assert_refused(call(ws, "read_file", {"path": "etc/passwd"}), "outside the workspace", "symlink")
    assert_refused(call(ws, "read_file", {"path": "etc"}), "outside the workspace")
    assert_refused(call(ws, "list_files", {"path": "etc"}), "outside the workspace")
    assert_refused(call(ws, "write_file", {"path": "etc/baton-test", "content": "x"}), "outside")
    assert not Path("/etc/baton-test").exists()


def test_symlink_to_outside_file_is_refused(ws: Path, outside: Path):
    """A symlink to a file outside can be neither read nor overwritten."""
    (ws / "s.txt").symlink_to(outside / "secret.txt")
    assert_refused(call(ws, "read_file", {"path": "s.txt"}), "outside the workspace")
    assert_refused(call(ws, "write_file", {"path": "s.txt", "content": "pwned"}), "outside the workspace")
    assert (outside / "secret.txt").read_text() == "top secret"


def test_write_through_dangling_symlink_does_not_create_outside(ws: Path, outside: Path):
    """A dangling symlink (file or directory) pointing outside is refused and its target never created."""
    (ws / "new.txt").symlink_to(outside / "created.txt")
    (ws / "newdir").symlink_to(outside / "made")
    assert_refused(call(ws, "write_file", {"path": "new.txt", "content": "x"}), "outside the workspace")
    assert_refused(call(ws, "write_file", {"path": "newdir/f.txt", "content": "x"}), "outside")
    assert not (outside / "created.txt").exists()
    assert not (outside / "made").exists()


def test_symlink_inside_the_workspace_is_followed(ws: Path):
    """A symlink whose target is inside the workspace is fine for reading and writing."""
    (ws / "real").mkdir()
    (ws / "real" / "f.txt").write_text("inside")
    (ws / "alias").symlink_to(ws / "real")
    (ws / "f-link").symlink_to("real/f.txt")
    assert call(ws, "read_file", {"path": "alias/f.txt"}).content == "inside"
    assert call(ws, "read_file", {"path": "f-link"}).content == "inside"
    assert call(ws, "write_file", {"path": "f-link", "content": "new"}).content == "wrote 3 bytes to real/f.txt"
    assert (ws / "real" / "f.txt").read_text() == "new"


def test_symlinked_root_is_accepted(tmp_path: Path, ws: Path):
    """A workspace reached through a symlink works: the root is compared in its resolved form."""
    (tmp_path / "ws-link").symlink_to(ws)
    assert not call(tmp_path / "ws-link", "write_file", {"path": "a", "content": "x"}).is_error
    assert (ws / "a").read_text() == "x"


MODES = {"bwrap": workspace.DEFAULT_SANDBOX, "none": None}


@pytest.fixture(params=sorted(MODES))
def mode(request: pytest.FixtureRequest) -> dict:
    """run_command's behaviour that holds both sandboxed (the default) and with BATON_SANDBOX=none."""
    return {"sandbox": MODES[request.param]}


def test_run_command_runs_in_the_workspace(ws: Path, mode: dict):
    """run_command reports the exit code and output, and its working directory is the workspace root."""
    assert call(ws, "run_command", {"command": "echo hi"}, **mode).content == "exit code 0\n--- stdout ---\nhi\n"
    assert call(ws, "run_command", {"command": "pwd"}, **mode).content.endswith(f"\n{os.path.realpath(ws)}\n")
    failed = call(ws, "run_command", {"command": "sh -c 'echo oops >&2; exit 3'"}, **mode)
    assert not failed.is_error
    assert failed.content == "exit code 3\n--- stderr ---\noops\n"


@pytest.mark.parametrize("command", ["echo hi; touch pwned", "echo hi && touch pwned", "echo $(touch pwned)"])
def test_run_command_uses_no_shell(ws: Path, command: str, mode: dict):
    """Shell syntax is passed to the program literally, so an injected second command never runs."""
    outcome = call(ws, "run_command", {"command": command}, **mode)
    assert not outcome.is_error and outcome.content.startswith("exit code 0")
    assert not (ws / "pwned").exists()


SECRETS = {
    "ANTHROPIC_API_KEY": "sk-test-secret",
    "ANTHROPIC_BASE_URL": "http://anthropic.internal",
    "MY_TOKEN": "tok-123456",
    "Db_Password": "hunter2",
    "NPM_AUTH": "npm-auth-value",
    "BATON_REDIS_URL": "redis://localhost:6379/0",
    "SOME_DSN": "postgres://user:pa55word@db:5432/x",
    "CACHE": "redis://:onlypass@cache:6379",
}


def test_unconfined_run_command_strips_secrets_from_the_environment(ws: Path, monkeypatch: pytest.MonkeyPatch):
    """BATON_SANDBOX=none: keys, tokens, passwords in URLs and Baton's Redis URLs never reach the command's own
    environment; PATH and plain variables do."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KEEP_ME", "plain-value")
    env = call(ws, "run_command", {"command": "env"}, sandbox=None).content
    for name, value in SECRETS.items():
        assert name not in env and value not in env
    assert f"PATH={os.environ['PATH']}" in env
    assert "KEEP_ME=plain-value" in env


def test_sandboxed_environment_is_only_path_home_and_lang(ws: Path, monkeypatch: pytest.MonkeyPatch):
    """In the sandbox the environment is rebuilt, not scrubbed: PATH, HOME (the workspace) and LANG, plus the
    PWD a shell or env sets itself; nothing of the worker's, secret or not."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KEEP_ME", "plain-value")
    out = call(ws, "run_command", {"command": "env"}).content
    lines = out.split("--- stdout ---\n", 1)[1].splitlines()
    env = dict(line.split("=", 1) for line in lines)
    assert set(env) <= {"PATH", "HOME", "LANG", "PWD"}
    assert env["PATH"] == workspace.DEFAULT_SANDBOX.path
    assert env["HOME"] == os.path.realpath(ws) and env["LANG"] == "C.UTF-8"


def _host_pids(argv: list[str]) -> list[int]:
    """Host pids of live (non-zombie) processes whose command line is exactly `argv`."""
    wanted = ("\0".join(argv) + "\0").encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cmdline").read_bytes() == wanted and _alive(int(entry.name)):
                found.append(int(entry.name))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def _gone(argv: list[str], timeout: float = 5) -> bool:
    """Whether every host process running `argv` is gone within `timeout` (a container's init reaps late)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _host_pids(argv):
        time.sleep(0.05)
    return not _host_pids(argv)


def test_run_command_timeout_kills_everything_it_started(ws: Path, mode: dict):
    """A command past its time limit is an error result returned promptly, and its children die too."""
    sleeper = ["sleep", "30.4711"]  # a command line no other process on the host has
    started = time.monotonic()
    outcome = call(
        ws, "run_command", {"command": f"sh -c '{shlex.join(sleeper)} & wait'"}, command_timeout=0.5, **mode
    )
    assert time.monotonic() - started < 5
    assert_refused(outcome, "timed out after 0.5 s")
    assert _gone(sleeper)


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a container's init may not reap it at once)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_background_children_do_not_outlive_a_finished_command(ws: Path, mode: dict):
    """A child left running in the background by a command that exits normally is killed with it."""
    sleeper = ["sleep", "30.4712"]
    outcome = call(ws, "run_command", {"command": f"sh -c '{shlex.join(sleeper)} > /dev/null 2>&1 & echo bg'"}, **mode)
    assert outcome.content.startswith("exit code 0")
    assert _gone(sleeper)


def test_run_command_output_is_capped(ws: Path, mode: dict):
    """Output beyond output_cap is cut with a note, so one noisy command cannot flood the prompt."""
    outcome = call(ws, "run_command", {"command": "python3 -c \"print('x' * 5000)\""}, output_cap=200, **mode)
    assert not outcome.is_error
    assert outcome.content.startswith("exit code 0\n--- stdout ---\nxxx")
    assert len(outcome.content) < 260 and "characters cut" in outcome.content


def test_huge_output_is_drained_not_held(ws: Path, mode: dict):
    """200 MB on stdout: the worker keeps a bounded head, counts what it threw away, and the command ends."""
    outcome = call(ws, "run_command", {"command": "head -c 200000000 /dev/zero"}, output_cap=1000, **mode)
    assert not outcome.is_error and outcome.content.startswith("exit code 0")
    assert len(outcome.content) < 1100 and "characters cut" in outcome.content
    assert outcome.content.count("\0") <= 1000


def test_run_command_refusals(ws: Path, mode: dict):
    """A missing program, an unsplittable line and an empty line are error results with a reason."""
    assert_refused(call(ws, "run_command", {"command": "no-such-program-xyz --help"}, **mode), "command not found: ")
    assert_refused(call(ws, "run_command", {"command": "echo 'unterminated"}, **mode), "cannot split")
    assert_refused(call(ws, "run_command", {"command": "   "}, **mode), "empty")
    assert_refused(call(ws, "run_command", {"command": "echo a\x00b"}, **mode), "refused")
