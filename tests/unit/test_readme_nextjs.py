"""The README's "Use it from Next.js" files are the app tests/browser/test_nextjs_app.py builds and drives:
each block marked `<!-- nextjs-example: PATH -->` is tests/js/next-app/PATH byte for byte, and every file of
that app is in the README but the few it says are not (generated or repository-only)."""

from __future__ import annotations

import re
import subprocess

from tests.support.processes import REPO

APP = REPO / "tests" / "js" / "next-app"
BLOCK = re.compile(r"<!-- nextjs-example: (?P<path>\S+) -->\n```\w*\n(?P<text>.*?)```\n", re.DOTALL)
# Not in the README: what `next build` needs but writes or completes itself (tsconfig.json, the lock), what
# only this repository needs (next.config.ts: tests/js beside it has a lockfile of its own), and .gitignore.
NOT_IN_README = {"package-lock.json", "tsconfig.json", "next.config.ts", ".gitignore"}


def readme_files() -> dict[str, str]:
    return {m["path"]: m["text"] for m in BLOCK.finditer((REPO / "README.md").read_text())}


def test_every_block_is_the_file_it_names():
    blocks = readme_files()
    assert blocks, "the README has no nextjs-example blocks"
    for path, text in blocks.items():
        assert (APP / path).read_text() == text, f"README's {path} differs from tests/js/next-app/{path}"


def test_every_file_of_the_app_is_in_the_readme():
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "."],
        cwd=APP, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert tracked, "tests/js/next-app has no files"
    assert set(tracked) - NOT_IN_README == set(readme_files())
