"""`baton worker ...` is `celery -A tasks worker -l info ...` with every Celery worker option passed on (issue 43),
run by the `celery` of the interpreter running `baton`, whatever PATH holds."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tasks.cli import main as cli
from tasks.cli.worker import celery_program, sets_loglevel, worker_argv

PY = sys.executable


def test_our_defaults_come_first_and_every_option_of_the_users_follows_as_given():
    """Celery takes the last of an option given twice, so the user's options, after ours, win."""
    argv = worker_argv(["-c", "2", "-P", "threads", "-Q", "q", "--hostname", "x@%h", "--without-gossip"], PY)
    prefix = celery_program(PY)
    assert argv == [*prefix, "-A", "tasks", "worker", "-l", "info",
                    "-c", "2", "-P", "threads", "-Q", "q", "--hostname", "x@%h", "--without-gossip"]


@pytest.mark.parametrize("given", [["-l", "debug"], ["-ldebug"], ["--loglevel", "debug"], ["--loglevel=debug"],
                                   ["-c", "2", "-l", "warning"]])
def test_a_log_level_of_the_users_replaces_ours(given):
    assert sets_loglevel(given)
    argv = worker_argv(given, PY)
    assert "info" not in argv and argv[-len(given):] == given


@pytest.mark.parametrize("given", [[], ["-c", "2"], ["--logfile", "w.log"], ["--without-mingle"], ["-Q", "logs"]])
def test_options_that_are_not_a_log_level_keep_ours(given):
    assert not sets_loglevel(given)
    assert worker_argv(given, PY)[-len(given) - 2:][:2] == ["-l", "info"]


def test_the_old_double_dash_is_dropped_rather_than_read_by_celery_as_configuration():
    """`baton worker -- -c 2` was the way round argparse; Celery reads what follows `--` as config settings
    ("Unable to parse extra configuration")."""
    assert worker_argv(["--", "-c", "2"], PY)[-4:] == ["-l", "info", "-c", "2"]


def _bin(tmp_path: Path, shebang: str | None) -> str:
    """A bin directory holding `python` (a link to this interpreter) and, unless None, a `celery` script."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python").symlink_to(PY)
    (bindir / "python3").symlink_to(PY)
    if shebang is not None:
        script = bindir / "celery"
        script.write_text(f"#!{shebang}\nimport celery.__main__\n")
        script.chmod(0o755)
    return str(bindir / "python")


def test_the_celery_script_beside_the_interpreter_runs_when_it_is_that_interpreters(tmp_path: Path):
    """A virtualenv run without activating it (`/srv/venv/bin/baton worker`): its own `celery`, not PATH's."""
    python = _bin(tmp_path, shebang=str(tmp_path / "bin" / "python3"))  # pip writes the venv's python, either name
    assert celery_program(python) == [str(tmp_path / "bin" / "celery")]


@pytest.mark.parametrize("shebang", [None, "/usr/bin/env python3", "/opt/other/bin/python3"])
def test_otherwise_the_interpreter_runs_celery_as_a_module(tmp_path: Path, shebang):
    """No script beside it, or one that another Python runs (which may not even have Baton): `python -m celery`."""
    python = _bin(tmp_path, shebang=shebang)
    assert celery_program(python) == [python, "-m", "celery"]


def test_baton_worker_hands_everything_after_worker_to_celery(monkeypatch):
    """argparse never sees the worker's options: `-c 2` was "unrecognized arguments"; `--help` is Celery's."""
    ran: list[list[str]] = []

    def execv(path: str, argv: list[str]) -> None:  # what would replace this process
        ran.append(argv)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", execv)
    with pytest.raises(SystemExit):
        cli.main(["worker", "-c", "2", "-P", "threads", "--help"])
    assert ran[0][-5:] == ["-c", "2", "-P", "threads", "--help"]
