"""The fake API's cache and context-limit semantics: prefix hits per mark, the usage fields through the real SDK
and Baton's provider, the 4-mark limit, and the "prompt is too long" 400 (classified as context_overflow)."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

from agent.loop.cancel import CancelToken
from agent.loop.failures import FailureClass, classify
from agent.provider.anthropic_provider import AnthropicProvider
from agent.provider.base import AttemptFailed, ProviderRequest
from tests.support.fake_anthropic import FakeMessagesServer, text
from tests.support.fake_prompt_cache import PromptCache, block_tokens, prompt_blocks, prompt_tokens

MARK = {"type": "ephemeral"}
SYSTEM = [{"type": "text", "text": "s" * 2000, "cache_control": MARK}]


def body(*turns: str, mark_last: bool = True, system=SYSTEM) -> dict:
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": [{"type": "text", "text": t}]}
                for i, t in enumerate(turns)]
    if mark_last:
        messages[-1]["content"][-1]["cache_control"] = MARK
    return {"model": "m", "max_tokens": 10, "system": system, "messages": messages}


def test_a_marked_prefix_is_written_once_then_read():
    """First request: everything up to the last mark is a cache write. The same request again: all of it is a
    read. A longer request (one more turn) reads the old prefix and writes only what was added. Without marks,
    everything is plain input. Totals always equal the prompt's size."""
    cache = PromptCache()
    first = cache.account(body("q" * 400))
    size = prompt_tokens(body("q" * 400))
    assert (first.input_tokens, first.cache_creation_input_tokens, first.cache_read_input_tokens) == (0, size, 0)
    again = cache.account(body("q" * 400))
    assert again.cache_read_input_tokens == size and again.cache_creation_input_tokens == 0
    longer = body("q" * 400, "a" * 40, "r" * 400)
    grown = cache.account(longer)
    assert grown.cache_read_input_tokens == size and grown.total == prompt_tokens(longer)
    assert grown.cache_creation_input_tokens == prompt_tokens(longer) - size
    plain = PromptCache().account(body("q" * 400, mark_last=False, system="plain"))
    assert plain.cache_creation_input_tokens == plain.cache_read_input_tokens == 0


def test_changed_bytes_miss_and_lookback_is_limited():
    """A prefix that differs in one byte misses (only the unchanged marked system prefix is read); a hit more
    than 20 blocks before the mark is not found."""
    cache = PromptCache()
    cache.account(body("q" * 400))
    changed = cache.account(body("Q" + "q" * 399))
    assert changed.cache_read_input_tokens == block_tokens(prompt_blocks(body("x"))[0][0])
    far = PromptCache()
    far.account(body("start", system=None))
    turns = ["start", *[f"t{i}" for i in range(24)]]
    missed = far.account(body(*turns, system=None))
    assert missed.cache_read_input_tokens == 0


def test_min_tokens_stands_for_the_models_minimum():
    """A prefix below the minimum is neither written nor read (the API silently does not cache it)."""
    cache = PromptCache(min_tokens=10_000)
    cache.account(body("q"))
    assert cache.account(body("q")).cache_read_input_tokens == 0


@pytest.fixture
def server() -> Iterator[FakeMessagesServer]:
    with FakeMessagesServer(lambda b, i: text("ok"), prompt_cache=True) as s:
        yield s


def _provider(server: FakeMessagesServer) -> AnthropicProvider:
    client = anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0)
    return AnthropicProvider(idle_timeout=5, client=client)


def test_the_provider_reads_the_cache_usage_the_fake_reports(server):
    """Through the real SDK and Baton's provider: the second identical request reports cache_read_input_tokens,
    the first cache_creation_input_tokens, as the API's usage fields."""
    b = body("q" * 400)
    request = ProviderRequest(model="m", messages=b["messages"], system=b["system"])
    first = _provider(server).stream(request, cancel=CancelToken())
    second = _provider(server).stream(request, cancel=CancelToken())
    assert first.usage.cache_creation_input_tokens > 0 and first.usage.cache_read_input_tokens == 0
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.input_tokens == 0 and [e["index"] for e in server.billing] == [0, 1]


def test_too_long_and_too_many_marks_are_the_apis_400s(server):
    """Past `context_limit`: 400 "prompt is too long: N tokens > M maximum", classified context_overflow and
    listed in `too_long`, not in `rejections`. Five marks: 400 invalid_request_error (a bad request)."""
    server.context_limit = 100
    b = body("q" * 400)
    with pytest.raises(AttemptFailed) as info:
        _provider(server).stream(ProviderRequest(model="m", messages=b["messages"], system=b["system"]),
                                 cancel=CancelToken())
    assert classify(info.value).failure_class is FailureClass.CONTEXT_OVERFLOW
    assert f"prompt is too long: {prompt_tokens(b)} tokens > 100 maximum" in str(info.value)
    assert server.too_long == [0] and server.rejections == []
    server.context_limit = None
    many = body("a", "b", "c", "d", "e")
    for message in many["messages"]:
        message["content"][-1]["cache_control"] = MARK
    with pytest.raises(AttemptFailed) as info:
        _provider(server).stream(ProviderRequest(model="m", messages=many["messages"], system=many["system"]),
                                 cancel=CancelToken())
    assert classify(info.value).failure_class is FailureClass.PROVIDER_BAD_REQUEST
    assert "A maximum of 4 blocks with cache_control" in server.rejections[0]
