"""How failures become HTTP answers: 422 with the client's message, 404 for unknown ids, 409 for a busy chat
(`on_busy="reject"`), 503 without the store or the broker."""

from __future__ import annotations

import logging

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from tasks.client import Busy, NotFound, Unavailable, ValidationError
from tasks.reach import STORE_ERRORS

log = logging.getLogger("baton.web")


JSON_BODY = "send a JSON object with Content-Type: application/json"


def describe(errors: list[dict]) -> str:
    """One readable line from FastAPI's validation errors, e.g. `text: Field required`."""
    parts = []
    for problem in errors:
        loc = [str(p) for p in problem.get("loc", ())]
        kind, msg = problem.get("type"), problem.get("msg", "invalid")
        if kind == "json_invalid":
            reason = (problem.get("ctx") or {}).get("error", "")
            parts.append(
                f"the body is not valid JSON ({reason}); {JSON_BODY}"
                if reason
                else f"the body is not valid JSON; {JSON_BODY}"
            )
        elif loc == ["body"] and kind == "missing":
            parts.append(f"the body is missing; {JSON_BODY}")
        elif loc == ["body"]:
            parts.append(f"the body must be a JSON object; {JSON_BODY}")
        else:
            field = ".".join(loc[1:] if loc and loc[0] == "body" else loc)
            parts.append(f"{field}: {msg}" if field else msg)
    return "; ".join(parts) or "invalid request"


async def _request_invalid(_request: Request, err: RequestValidationError) -> JSONResponse:
    return JSONResponse({"detail": describe(list(err.errors()))}, status_code=422)


async def _client_invalid(_request: Request, err: ValidationError) -> JSONResponse:
    return JSONResponse({"detail": str(err)}, status_code=422)


async def _not_found(_request: Request, err: NotFound) -> JSONResponse:
    return JSONResponse({"detail": str(err)}, status_code=404)


async def _busy(_request: Request, err: Busy) -> JSONResponse:
    return JSONResponse({"error": "busy", "turn_id": err.turn_id, "detail": str(err)}, status_code=409)


async def _store_down(_request: Request, err: redis.RedisError) -> JSONResponse:
    log.warning("store unavailable: %s", type(err).__name__)  # the message may carry a URL; the class is enough
    return JSONResponse({"detail": "the store (Redis) is unavailable; try again"}, status_code=503)


async def _unavailable(_request: Request, err: Unavailable) -> JSONResponse:
    # The log gets the whole sentence (the address, password masked); the caller only what is down.
    log.warning("%s", err)
    return JSONResponse({"detail": f"{err.label} is unavailable; try again"}, status_code=503)


def install(app: FastAPI) -> None:
    """Register the handlers on `app`."""
    app.add_exception_handler(RequestValidationError, _request_invalid)  # type: ignore[arg-type]
    app.add_exception_handler(ValidationError, _client_invalid)  # type: ignore[arg-type]
    app.add_exception_handler(NotFound, _not_found)  # type: ignore[arg-type]
    app.add_exception_handler(Busy, _busy)  # type: ignore[arg-type]
    app.add_exception_handler(Unavailable, _unavailable)  # type: ignore[arg-type]
    for error in STORE_ERRORS:
        app.add_exception_handler(error, _store_down)  # type: ignore[arg-type]
    app.add_exception_handler(redis.TimeoutError, _store_down)  # type: ignore[arg-type]
