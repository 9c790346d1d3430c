"""A provider's SDK clients in shards: each thread keeps to one, each shard's client is built once, on first use."""

from __future__ import annotations

import threading

import pytest

from agent.provider.shards import Shards


def test_threads_take_shards_round_robin_and_each_shard_is_built_once():
    built: list[object] = []

    def make() -> object:
        built.append(object())
        return built[-1]

    shards: Shards[object] = Shards(make, count=2)
    seen: list[tuple[object, object]] = []
    barrier = threading.Barrier(4)

    def use() -> None:
        barrier.wait()
        seen.append((shards.get(), shards.get()))  # a thread keeps to its shard

    threads = [threading.Thread(target=use) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(a is b for a, b in seen)
    assert len(built) == 2 and {id(a) for a, _ in seen} == {id(c) for c in built}


def test_a_given_client_is_the_only_shard_and_nothing_is_built():
    given = object()
    shards: Shards[object] = Shards(lambda: (_ for _ in ()).throw(AssertionError("built")), count=8, given=given)
    assert shards.get() is given


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_every_shards_sdk_client_shares_the_processs_one_tls_context(kind, monkeypatch):
    """Each shard's client is the SDK's own (its limits, keep-alive and proxies) with the process's one TLS context:
    building a context loads the CA bundle (~20 ms of CPU), and a threads worker at -c 500 holds 16 shards."""
    from agent.provider import transport
    from agent.provider.anthropic_provider import AnthropicProvider
    from agent.provider.openai_provider import OpenAIProvider

    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    provider = (AnthropicProvider if kind == "anthropic" else OpenAIProvider)(idle_timeout=5, shards=2)
    first, second = provider._new_client(), provider._new_client()
    contexts = [c._client._transport._pool._ssl_context for c in (first, second)]  # httpx2's transport's pool
    assert contexts[0] is contexts[1] is transport.shared_tls()
