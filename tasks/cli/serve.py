"""`baton serve`: the HTTP API and the chat page under uvicorn, on loopback unless a token guards it."""

from __future__ import annotations

import logging
import re
import sys

from config.hosts import is_loopback
from config.settings import Settings, SettingsError, load_settings

TOKEN_IN_QUERY = re.compile(r"([?&]token=)[^&\s\"]*")


def refusal(host: str, settings: Settings) -> str | None:
    """Why `baton serve` will not listen on `host`, or None when it may."""
    if is_loopback(host) or settings.api_token is not None:
        return None
    return (
        f"refusing to listen on {host} without BATON_API_TOKEN: anyone who can reach it could read and "
        "drive every chat. Set BATON_API_TOKEN, or listen on 127.0.0.1."
    )


class RedactToken(logging.Filter):
    """Blanks `?token=...` in uvicorn's access log lines: the page passes the token in its URLs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(TOKEN_IN_QUERY.sub(r"\1***", a) if isinstance(a, str) else a for a in record.args)
        return True


def page_url(host: str, port: int, settings: Settings) -> str:
    """The URL to print. With a token, a `?token=$BATON_API_TOKEN` hint rather than the token itself:
    what `baton serve` prints ends up in terminals' scrollback and containers' logs, a secret must not."""
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    return f"{url}?token=$BATON_API_TOKEN" if settings.api_token is not None else url


def serve(host: str, port: int) -> int:
    """Run uvicorn with `web.app:serve_app` (create_app; without a token, loopback Hosts only) until
    interrupted. Exit 2 for bad settings or a refused host."""
    import uvicorn

    try:
        settings = load_settings()
    except SettingsError as err:
        print(f"baton: {err}", file=sys.stderr)
        return 2
    why = refusal(host, settings)
    if why is not None:
        print(f"baton: {why}", file=sys.stderr)
        return 2
    logging.getLogger("uvicorn.access").addFilter(RedactToken())
    print(f"Baton: the API and the chat page on {page_url(host, port, settings)}", flush=True)
    uvicorn.run(
        "web.app:serve_app",
        factory=True,
        host=host,
        port=port,
        log_level="info",
        timeout_graceful_shutdown=5,  # open streams must not hold a restart up
    )
    return 0
