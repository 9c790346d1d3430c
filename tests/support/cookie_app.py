"""The README's cookie-login example (SessionMiddleware, an `authorize` and a `user` read from the session, Baton
mounted at /baton), run from the README's own text, plus a login, for uvicorn in tests (`tests.support.cookie_app:app`).

`GET /login?user=NAME` is the whole login: it puts NAME in the signed session cookie and redirects to the
mounted page (`next`, a path on this site; by default NAME's first chat). The rule: a signed-in user may use
the chats and runs whose id starts with `NAME-`; nobody else may use anything (404, as for an unknown id).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException
from fastapi.responses import RedirectResponse

SECRET = "cookie-app-test-secret"  # a fixed test key: the cookie only has to be signed, not secret here
NAME = re.compile(r"[a-z][a-z0-9]{0,31}")

# The README's example itself, run as written (its `SECRET` given here): what the browser test drives is what a
# reader copies.
_README = Path(__file__).resolve().parents[2] / "README.md"
_EXAMPLE = re.search(r"<!-- cookie-login-example -->\s*```python\n(.*?)```", _README.read_text(), re.S)
if _EXAMPLE is None:
    raise RuntimeError("README.md has no cookie-login example")
_namespace: dict[str, Any] = {"SECRET": SECRET}
exec(compile(_EXAMPLE.group(1), f"{_README} (cookie-login-example)", "exec"), _namespace)
app: FastAPI = _namespace["app"]


@app.get("/login")
def login(request: Request, user: str, next: str | None = None) -> RedirectResponse:
    if not NAME.fullmatch(user):
        raise HTTPException(422, "a user name is a lowercase word")
    request.session["user"] = user
    # Only a path on this site (`//host` would leave it): an open redirect is no part of a login.
    target = next if next is not None and next.startswith("/") and not next.startswith("//") else None
    return RedirectResponse(target or f"/baton/?chat={user}-1", status_code=303)
