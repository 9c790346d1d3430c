"""The OpenAI provider: Chat Completions through the official `openai` SDK, streaming, its own retries off.

Any server that speaks the API (OpenAI, vLLM, Ollama, OpenRouter, a gateway) is reached through the SDK's
own settings, `OPENAI_BASE_URL` and `OPENAI_API_KEY`. As for Anthropic: the SDK's read timeout is the idle
timeout (a silent stream is a stall), a stop or drain closes the response from the cancel token's callback,
each calling thread keeps to one of `shards` clients, and the events come as the plain JSON dicts the
reducer folds (the SDK's `Stream` of `object`: its SSE decoding, status errors and in-stream errors, without
building a pydantic model per chunk). The body is `openai_request.chat_body`, the reduction `openai_reducer`.
"""

from __future__ import annotations

from typing import Any

import httpx2
import openai
from openai import Stream

from agent.errors import ProviderError
from agent.loop.cancel import CancelToken
from agent.loop.failures import FailureClass, IncompleteStream
from agent.provider import openai_errors, transport  # noqa: F401 - openai_errors registers the SDK's exceptions
from agent.provider.attempt import stream_attempt
from agent.provider.base import Answer, AttemptFailed, Endpoint, ProviderRequest, TextSink
from agent.provider.openai_reducer import ChatSnapshot, MalformedToolCall, accumulate
from agent.provider.openai_request import chat_body
from agent.provider.rate_gate import HeadersSink
from agent.provider.shards import Shards

NO_CREDENTIALS = "no OpenAI credentials are configured: set OPENAI_API_KEY in the workers' environment"


def credentials_problem() -> str | None:
    """What a worker logs at start when the SDK finds no key; None when it does."""
    try:
        client = openai.OpenAI(max_retries=0)
    except openai.OpenAIError as err:
        return f"{NO_CREDENTIALS} ({err})"
    return None if client.api_key else NO_CREDENTIALS


class OpenAIProvider:
    """Streams answers from the Chat Completions API; every fault surfaces as `AttemptFailed` for replay."""

    def __init__(
        self,
        *,
        idle_timeout: float,
        client: openai.OpenAI | None = None,
        shards: int = 1,
        endpoint: Endpoint | None = None,
        on_headers: HeadersSink | None = None,
    ) -> None:
        self._idle_timeout = idle_timeout
        self._on_headers = on_headers  # what every answer's headers say of the rate limits goes to the fleet
        self._endpoint = endpoint or Endpoint()
        self._shards: Shards[openai.OpenAI] = Shards(self._new_client, shards, given=client)

    def _new_client(self) -> openai.OpenAI:
        endpoint = self._endpoint
        key = endpoint.key()  # None: the SDK's own lookup (OPENAI_API_KEY)
        if endpoint.api_key_env is not None and key is None:
            raise _no_credentials(endpoint.missing_key())
        try:
            client = openai.OpenAI(
                max_retries=0,  # the retry budget is ours alone; budgets must never multiply
                timeout=httpx2.Timeout(connect=10.0, read=self._idle_timeout, write=30.0, pool=10.0),
                api_key=key,  # None: the SDK reads its own variable, as before
                base_url=endpoint.base_url,  # None: the SDK's *_BASE_URL variable, or its default
                http_client=openai.DefaultHttpxClient(verify=transport.shared_tls()),  # the SDK's, one TLS context
            )
        except openai.OpenAIError as err:
            raise _no_credentials() from err
        if not client.api_key:
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
        body = transport.json_body(chat_body(request))
        snapshot = ChatSnapshot()
        client = self._shards.get()  # no credentials: a provider_auth failure, before any attempt is made or billed

        def feed(chunk: dict[str, Any]) -> None:
            thoughts = len(snapshot.reasoning)
            added = accumulate(chunk, snapshot)
            if on_reasoning is not None:
                for thought in snapshot.reasoning[thoughts:]:  # a chunk's reasoning comes before its text
                    on_reasoning(thought)
            if added and on_text is not None:
                on_text(added)

        stream_attempt(
            lambda: client.post(
                "/chat/completions", content=body, cast_to=object, stream=True, stream_cls=Stream[object]
            ),
            feed,
            snapshot,
            cancel=cancel,
            on_headers=self._on_headers,
            model=request.model,
            # Dropped before a finish_reason (mid-arguments included): partial, never run as a tool call.
            ended=lambda: snapshot.finished,
            unended="the stream ended without a finish_reason",
        )
        try:
            return snapshot.to_answer()
        except MalformedToolCall as err:
            # Sampled again, the model usually writes valid JSON: a discarded attempt, replayed in the budget.
            raise AttemptFailed(IncompleteStream(str(err)), snapshot.usage, had_output=True) from err


def _no_credentials(message: str = NO_CREDENTIALS) -> ProviderError:
    return ProviderError(message, failure_class=FailureClass.PROVIDER_AUTH, retryable=False)
