"""One streamed attempt of a model call, as every HTTP provider makes it: opened, fed event by event, ended.

What the providers share is how an attempt ends: a stop or drain (the cancel token) aborts the response and the
attempt is cut (`AttemptCut`, nothing to keep); any other failure, or a stream that ended before the provider's
last event, fails it (`AttemptFailed`, whether output had come). The rate-limit headers of the answer (or of the
error that refused it: a 429's `retry-after`) go to the gate before anything else, so a replay backs off as told.
Each provider keeps its own request, events and reducer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

from agent.errors import Cancelled
from agent.loop.cancel import CancelToken
from agent.loop.failures import IncompleteStream
from agent.provider import transport
from agent.provider.base import AttemptCut, AttemptFailed, TokenUsage
from agent.provider.rate_gate import HeadersSink


class Progress(Protocol):
    """What an attempt's reducer knows as it goes: the usage so far and whether any output came."""

    @property
    def usage(self) -> TokenUsage: ...

    @property
    def had_output(self) -> bool: ...


def stream_attempt(
    open_stream: Callable[[], Any],
    feed: Callable[[dict[str, Any]], None],
    progress: Progress,
    *,
    cancel: CancelToken,
    on_headers: HeadersSink | None,
    model: str,
    ended: Callable[[], bool],
    unended: str,
) -> None:
    """Open the SDK's stream (`open_stream`), give `feed` each event's JSON as it came, and raise what ended the
    attempt if it did not end well: `ended` says whether the provider's last event came (else `unended` says which
    was missing)."""
    try:
        stream = open_stream()
    except Exception as err:
        if on_headers is not None and (headers := transport.error_headers(err)) is not None:
            on_headers(model, headers)  # a 429's retry-after, before the replay backs off
        raise AttemptFailed(err, progress.usage, had_output=False) from err
    if on_headers is not None:
        on_headers(model, stream.response.headers)
    unregister = cancel.on_cancel(lambda: transport.abort(stream.response))
    try:
        for event in stream:
            feed(cast(dict[str, Any], event))  # cast_to=object: the event's JSON as it came
            cancel.raise_if_set()
    except Cancelled as stop:
        raise AttemptCut(stop.reason, progress.usage) from None
    except Exception as err:
        if cancel.is_set():
            raise AttemptCut(cancel.reason or "stop", progress.usage) from err
        raise AttemptFailed(err, progress.usage, had_output=progress.had_output) from err
    finally:
        unregister()
        stream.close()
    if not ended():
        if cancel.is_set():
            raise AttemptCut(cancel.reason or "stop", progress.usage)
        raise AttemptFailed(IncompleteStream(unended), progress.usage, had_output=progress.had_output)
