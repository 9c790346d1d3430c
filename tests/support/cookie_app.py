"""An app with its own cookie login that mounts Baton exactly as the README shows (SessionMiddleware, an
`authorize` and a `user` read from the session), for uvicorn in tests (`tests.support.cookie_app:app`).

`GET /login?user=NAME` is the whole login: it puts NAME in the signed session cookie and redirects to the
mounted page (`next`, a path on this site; by default NAME's first chat). The rule: a signed-in user may use
the chats and runs whose id starts with `NAME-`; nobody else may use anything (404, as for an unknown id).
"""

from __future__ import annotations

import re

from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException
from fastapi.responses import RedirectResponse
from starlette.middleware.sessions import SessionMiddleware

from web.app import create_app

SECRET = "cookie-app-test-secret"  # a fixed test key: the cookie only has to be signed, not secret here
NAME = re.compile(r"[a-z][a-z0-9]{0,31}")

app = FastAPI()
app.add_middleware(SessionMiddleware, secret_key=SECRET)  # the login puts "user" in the session


@app.get("/login")
def login(request: Request, user: str, next: str | None = None) -> RedirectResponse:
    if not NAME.fullmatch(user):
        raise HTTPException(422, "a user name is a lowercase word")
    request.session["user"] = user
    # Only a path on this site (`//host` would leave it): an open redirect is no part of a login.
    target = next if next is not None and next.startswith("/") and not next.startswith("//") else None
    return RedirectResponse(target or f"/baton/?chat={user}-1", status_code=303)


async def authorize(request: Request, kind: str, ident: str) -> bool:
    user = request.session.get("user")
    return user is not None and ident.startswith(f"{user}-")  # or look it up in your own table


app.mount("/baton", create_app(authorize=authorize, user=lambda request: request.session.get("user")))
