"""The Anthropic provider: the official SDK, streaming, with its own retries off.

The SDK's read timeout is per read, so setting it to the idle timeout turns a silent stream into
`httpx2.ReadTimeout` (a stall). A stop or drain closes the response from the cancel token's
callback, which unblocks a read that is waiting on a silent socket.

The request goes through the SDK's own `post` into the SDK's `Stream` of plain objects: its SSE decoding,
its status errors and its in-stream `error` events, as `messages.create` has them, but each event comes as
the JSON dict the reducer folds instead of being built into a pydantic model and dumped back (`.to_dict()`),
which was half of what an event cost the calling thread (31.6 -> 15.2 us a text delta).
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
from anthropic import Stream
from anthropic._types import RequestOptions

from agent.errors import ProviderError
from agent.history.binding import wire_blocks
from agent.history.request import calls_as_text
from agent.loop.cancel import CancelToken
from agent.loop.failures import FailureClass
from agent.provider import anthropic_errors, transport  # noqa: F401 - anthropic_errors registers the SDK's exceptions
from agent.provider.attempt import stream_attempt
from agent.provider.base import Answer, Endpoint, ProviderRequest, TextSink
from agent.provider.rate_gate import HeadersSink
from agent.provider.reducer import Snapshot, accumulate
from agent.provider.shards import Shards

BINDING_BETA = "thinking-binding-controls-2026-08-01"  # `thinking.block_binding` (anthropic 2.16's beta types)
NO_CREDENTIALS = (
    "no Anthropic credentials are configured: set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN, or an Anthropic "
    "profile) in the workers' environment"
)


def _has_credentials(client: anthropic.Anthropic) -> bool:
    # The SDK resolves a key, a token, a profile or federation at construction, and only complains (a TypeError)
    # when a request is sent: asking it what it resolved lets a worker say so at start and bill nothing.
    return any(getattr(client, name, None) is not None for name in ("api_key", "auth_token", "credentials"))


def credentials_problem() -> str | None:
    """What a worker logs at start when the SDK finds no credentials; None when it does."""
    try:
        client = anthropic.Anthropic(max_retries=0)
    except anthropic.AnthropicError as err:  # e.g. a profile named that cannot be read
        return f"{NO_CREDENTIALS} ({err})"
    return None if _has_credentials(client) else NO_CREDENTIALS


class AnthropicProvider:
    """Streams answers from the Messages API; every fault surfaces as `AttemptFailed` for replay.

    `shards` SDK clients, each a connection pool of its own, and each calling thread keeps to one: the
    pool's bookkeeping walks all its connections and requests on every request and every close, so one
    pool for hundreds of streams in flight made each request pay for all the others.
    """

    def __init__(
        self,
        *,
        idle_timeout: float,
        client: anthropic.Anthropic | None = None,
        shards: int = 1,
        endpoint: Endpoint | None = None,
        on_headers: HeadersSink | None = None,
    ) -> None:
        self._idle_timeout = idle_timeout
        self._on_headers = on_headers  # what every answer's headers say of the rate limits goes to the fleet
        self._endpoint = endpoint or Endpoint()
        self._shards: Shards[anthropic.Anthropic] = Shards(self._new_client, shards, given=client)

    def _new_client(self) -> anthropic.Anthropic:
        endpoint = self._endpoint
        key = endpoint.key()  # None: the SDK's own lookup (ANTHROPIC_API_KEY, a token, a profile)
        if endpoint.api_key_env is not None and key is None:
            raise _no_credentials(endpoint.missing_key())
        try:
            client = anthropic.Anthropic(
                max_retries=0,  # the retry budget is ours alone; budgets must never multiply
                timeout=httpx2.Timeout(connect=10.0, read=self._idle_timeout, write=30.0, pool=10.0),
                api_key=key,  # None: the SDK reads its own variable, as before
                base_url=endpoint.base_url,  # None: the SDK's *_BASE_URL variable, or its default
                http_client=anthropic.DefaultHttpxClient(verify=transport.shared_tls()),  # the SDK's, one TLS context
            )
        except anthropic.AnthropicError as err:
            raise _no_credentials() from err
        if not _has_credentials(client):
            raise _no_credentials()
        return client

    def stream(
        self,
        request: ProviderRequest,
        *,
        cancel: CancelToken,
        on_text: TextSink | None = None,
        on_reasoning: TextSink | None = None,
    ) -> Answer:
        cancel.raise_if_set()
        params: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            # Tools gone (the chat's agent now has none): its old calls as text, which the API takes. Reasoning
            # without a signature (an OpenAI-compatible server's) cannot be verified here: left out.
            "messages": signed_only(request.messages if request.tools else calls_as_text(request.messages)),
            "stream": True,
        }
        if request.tools:
            params["tools"] = request.tools
        if request.system:
            params["system"] = request.system
        if request.temperature is not None:
            params["temperature"] = request.temperature
        params.update(thinking_params(request.thinking, drop_stale=request.drop_stale_thinking))
        options: RequestOptions = {"headers": {"anthropic-beta": BINDING_BETA}} if request.drop_stale_thinking else {}
        snapshot = Snapshot()
        client = self._shards.get()  # no credentials: a provider_auth failure, before any attempt is made or billed

        def feed(raw: dict[str, Any]) -> None:
            accumulate(raw, snapshot)
            if raw.get("type") == "content_block_delta":
                delta = raw["delta"]
                if on_text is not None and delta.get("type") == "text_delta":
                    on_text(delta["text"])
                elif on_reasoning is not None and delta.get("type") == "thinking_delta" and delta.get("thinking"):
                    on_reasoning(delta["thinking"])

        body = transport.json_body(params)
        stream_attempt(
            lambda: client.post(
                "/v1/messages", content=body, cast_to=object, stream=True, stream_cls=Stream[object], options=options
            ),
            feed,
            snapshot,
            cancel=cancel,
            on_headers=self._on_headers,
            model=request.model,
            ended=lambda: snapshot.stopped,
            unended="the stream ended without message_stop",
        )
        return snapshot.to_answer()


def thinking_params(thinking: str | int | None, *, drop_stale: bool = False) -> dict[str, Any]:
    """The Messages API's form of an agent's thinking: a level is adaptive thinking at that effort (what the current
    models take), a number of tokens the `budget_tokens` of enabled thinking (what the earlier ones take). With
    `drop_stale`, thinking blocks whose prefix changed are the API's to drop (`block_binding`, a beta: the request
    carries `BINDING_BETA`), where a request cannot leave them out itself (agent/history/binding.py)."""
    if thinking is None:
        return {}
    config: dict[str, Any] = (
        {"type": "enabled", "budget_tokens": thinking} if isinstance(thinking, int) else {"type": "adaptive"}
    )
    if drop_stale:
        config["block_binding"] = {"prefix_mismatch_behavior": "drop_block"}
    if isinstance(thinking, int):
        return {"thinking": config}
    return {"thinking": config, "output_config": {"effort": thinking}}


def signed_only(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages without thinking blocks that carry no signature (the same list when there are none)."""

    def unsigned(block: dict[str, Any]) -> bool:
        return block.get("type") == "thinking" and not block.get("signature")

    if not any(unsigned(b) for b in wire_blocks(messages)):
        return messages
    return [
        {**m, "content": [b for b in m["content"] if not unsigned(b)]} if isinstance(m.get("content"), list) else m
        for m in messages
    ]


def _no_credentials(message: str = NO_CREDENTIALS) -> ProviderError:
    return ProviderError(message, failure_class=FailureClass.PROVIDER_AUTH, retryable=False)
