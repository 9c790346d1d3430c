"""Every module of the project imports in the interpreter the tests run in.

`.ci/run` runs the suite in a virtualenv of its own holding only what pyproject declares, so a module that
imports a package nobody declared (Starlette's `SessionMiddleware` needs `itsdangerous`, say) fails here, by
name, instead of passing on a machine whose Python happens to have it. The imports run in a child
interpreter: a module's import-time side effects (a Celery app, a gevent patch) stay out of this process.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("agent", "tasks", "web", "config", "bench", "tests.support")

_IMPORT_ALL = """
import importlib, json, sys
failed = {}
for name in json.loads(sys.stdin.read()):
    try:
        importlib.import_module(name)
    except Exception as err:  # every failure, named, not only the first
        failed[name] = f"{type(err).__name__}: {err}"
print(json.dumps(failed))
"""


def project_modules() -> list[str]:
    """The dotted names of every module under the project's packages, found on disk."""
    names: list[str] = []
    for package in PACKAGES:
        path = ROOT.joinpath(*package.split("."))
        names.append(package)
        for info in pkgutil.walk_packages([str(path)], prefix=f"{package}."):
            if not info.name.endswith(".__main__"):  # a command line, run rather than imported
                names.append(info.name)
    return sorted(names)


def test_every_module_imports_with_only_the_declared_packages():
    """Each module of agent, tasks, web, config, bench and tests/support imports (so each package it needs is
    installed: in CI's own venv, that means declared in pyproject)."""
    modules = project_modules()
    assert len(modules) > 100  # the walk found the tree, not an empty folder
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL],
        input=json.dumps(modules),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert failed == {}, "\n".join(f"{name}: {why}" for name, why in sorted(failed.items()))
