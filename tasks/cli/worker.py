"""`baton worker ...`: `celery -A tasks worker -l info ...`, every Celery worker option passed through as given.

Our defaults come first and the user's options after them, so the user's win where Celery takes the last of an
option given twice; a `-l`/`--loglevel` of the user's replaces ours outright rather than relying on that.

Which `celery` runs: the one installed for the interpreter running `baton`, never the first on PATH. A virtualenv
need not be activated (`/srv/venv/bin/baton worker` from a systemd unit or a crontab has no venv on PATH), and a
`celery` found on PATH may belong to another Python that cannot import Baton at all. So the `celery` script beside
`sys.executable` is run when it is that interpreter's own (its shebang names the same file); otherwise
`sys.executable -m celery`, which always is. The script is preferred where it fits because the process is then
named `celery`, as it is when started by hand: `pkill celery`, `ps`, supervisors and the README's drain notes find
it by that name, which `python -m celery` would not carry.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

DEFAULTS = ("-l", "info")


def sets_loglevel(args: Sequence[str]) -> bool:
    """Whether the user's worker options give a log level (`-l X`, `-lX`, `--loglevel X`, `--loglevel=X`)."""
    for arg in args:
        if arg == "--loglevel" or arg.startswith("--loglevel="):
            return True
        if arg.startswith("-l") and not arg.startswith("--"):  # `-l debug`, or click's glued form `-ldebug`
            return True
    return False


def celery_program(python: str) -> list[str]:
    """The argv prefix that runs Celery on `python`: its own `celery` script beside it, else `python -m celery`."""
    beside = os.path.join(os.path.dirname(python), "celery")
    if os.access(beside, os.X_OK) and _runs_on(beside, python):
        return [beside]
    return [python, "-m", "celery"]


def worker_argv(args: Sequence[str], python: str) -> list[str]:
    """The whole command line of `baton worker ARGS` run by the interpreter `python` (pure but for reading the
    `celery` script's first line)."""
    return [*celery_program(python), *_worker_args(args)]


def exec_worker(args: Sequence[str]) -> None:
    """Replace this process with the worker (signals and the exit status are then Celery's own)."""
    if not sys.executable:  # an embedding that cannot name its interpreter: PATH is all there is
        os.execvp("celery", ["celery", *_worker_args(args)])
    argv = worker_argv(args, sys.executable)
    os.execv(argv[0], argv)


def _worker_args(args: Sequence[str]) -> list[str]:
    """`-A tasks worker`, our defaults, then the user's options."""
    user = list(args)
    if user[:1] == ["--"]:  # the old way round argparse (`baton worker -- -c 2`): Celery would read it as config
        user = user[1:]
    ours = [] if sets_loglevel(user) else list(DEFAULTS)
    return ["-A", "tasks", "worker", *ours, *user]


def _runs_on(script: str, python: str) -> bool:
    """Whether `script`'s shebang names `python`: an interpreter in the same directory that is the same file once
    links are followed (a virtualenv's `bin/python` and `bin/python3` are links to one interpreter; the directory
    keeps a venv's script from passing for its base interpreter's, which resolves to the same file)."""
    try:
        with open(script, "rb") as fh:
            first = fh.readline(4096)
    except OSError:
        return False
    if not first.startswith(b"#!"):
        return False
    words = first[2:].decode(errors="replace").split()
    if not words:
        return False
    named = words[0]
    same_dir = os.path.realpath(os.path.dirname(named)) == os.path.realpath(os.path.dirname(python))
    return same_dir and os.path.realpath(named) == os.path.realpath(python)
