"""The README's cookie-login example and tests/support/cookie_app.py (what the browser test serves) stay one
app: every line of the example's code is a line of the module, so the test drives what the README shows."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def code(line: str) -> str:
    """A line without its comment and surrounding blanks (the two may comment the same line differently)."""
    return line.split("  #", 1)[0].strip()


def test_cookie_app_is_the_readme_example():
    readme = (REPO / "README.md").read_text()
    found = re.search(r"<!-- cookie-login-example -->\s*```python\n(.*?)```", readme, re.S)
    assert found, "README has no cookie-login example"
    module = {code(line) for line in (REPO / "tests" / "support" / "cookie_app.py").read_text().splitlines()}
    missing = [line for line in map(code, found.group(1).splitlines()) if line and line not in module]
    assert not missing, f"tests/support/cookie_app.py lacks the README's lines: {missing}"
