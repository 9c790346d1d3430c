"""The API token rule: with `BATON_API_TOKEN` set, every /api request carries it (header or `?token=`)."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request

BEARER = "bearer "


def presented_token(authorization: str | None, query_token: str | None) -> str | None:
    """The token a request offers: `Authorization: Bearer T` first, else `?token=T` (what EventSource can send)."""
    if authorization and authorization[: len(BEARER)].lower() == BEARER:
        return authorization[len(BEARER) :].strip()
    return query_token


def token_ok(expected: str | None, offered: str | None) -> bool:
    """True when no token is configured, or the offered one equals it (compared in constant time)."""
    if expected is None:
        return True
    if offered is None:
        return False
    return hmac.compare_digest(offered.encode("utf-8"), expected.encode("utf-8"))


def require_token(request: Request) -> None:
    """FastAPI dependency on the /api routes: 401 unless the request carries the configured token."""
    secret = request.app.state.settings.api_token
    expected = secret.get_secret_value() if secret is not None else None
    offered = presented_token(request.headers.get("authorization"), request.query_params.get("token"))
    if not token_ok(expected, offered):
        raise HTTPException(
            status_code=401,
            detail="missing or wrong API token (send Authorization: Bearer TOKEN or ?token=TOKEN)",
            headers={"WWW-Authenticate": "Bearer"},
        )
