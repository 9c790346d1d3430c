"""The README's cookie-login example runs as written: tests/support/cookie_app.py (what the browser test serves)
executes the README's own block, so importing it runs the example (a quick check before the browser test)."""

from __future__ import annotations

from starlette.routing import Mount


def test_the_readme_example_builds_the_app_with_baton_mounted():
    from tests.support.cookie_app import app

    mounts = [r for r in app.routes if isinstance(r, Mount)]
    assert [m.path for m in mounts] == ["/baton"]
    assert any(getattr(r, "path", None) == "/login" for r in app.routes)
