"""Builds the parts an execution needs from settings: the Redis client, provider and tool sets."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType

import redis

from agent.per_process import PerProcess
from agent.policy import Backoff
from agent.provider.base import Provider
from agent.provider.scripted import Cue, ScriptedProvider, directive_script, load_cues
from agent.sandbox import SandboxPolicy
from agent.tools import Tool, by_name, load_tools
from agent.workspace import workspace_tools
from config.settings import Settings
from tasks.store import connect, keys


@lru_cache(maxsize=8)
def redis_client(url: str) -> redis.Redis:
    """One pooled client per URL per process (a forked pool child builds its own on first use).

    Its pool is a blocking one sized for the units the process runs at once (`size_pools`).
    """
    pool = redis.BlockingConnectionPool.from_url(
        url, max_connections=connect.pool_size(), timeout=connect.POOL_WAIT_SECONDS, **connect.CLIENT_DEFAULTS
    )
    return redis.Redis(connection_pool=pool)


def store(settings: Settings) -> redis.Redis:
    """The process's pooled client of the store (plain Redis, or the master the Sentinels name)."""
    if not settings.sentinels:
        return redis_client(settings.redis_url)
    return connect.store_client(settings)


# Pools that run many units in one process (threads, greenlets); prefork and solo run one per process.
SHARED_PROCESS_POOLS = ("thread", "gevent", "eventlet")


def units_per_process(pool_module: str, concurrency: int) -> int:
    """How many units one worker process runs at once, from its Celery pool's module and concurrency."""
    return concurrency if any(name in pool_module for name in SHARED_PROCESS_POOLS) else 1


# Streams in flight per SDK client (one HTTP connection pool each) in a process that runs many units at once.
STREAMS_PER_PROVIDER_CLIENT = 32
_units = [1]  # units this process runs at once (`size_pools`)


def size_pools(units: int) -> None:
    """Size this process's store connection pools for `units` executions at once (before the first client)."""
    _units[0] = max(1, units)
    connect.size_pool(units)
    redis_client.cache_clear()


def forget_clients() -> None:
    """Drop every pooled client (a forked pool child must not share its parent's sockets)."""
    redis_client.cache_clear()
    connect.forget_clients()


class RedisCounter:
    """The scripted provider's fault counters, shared by every worker process."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client

    def incr(self, key: str) -> int:
        return int(self._client.hincrby(keys.SCRIPTED_COUNTS, key, 1))


@lru_cache(maxsize=4)
def scripted_cues(spec: str) -> dict[str, Cue]:
    """The cues `BATON_SCRIPTED_CUES` names, imported once per process."""
    return load_cues(spec)


_providers: PerProcess[Provider] = PerProcess()


def build_provider(settings: Settings, client: redis.Redis) -> Provider:
    """The provider of an execution: Anthropic's or OpenAI's is built once per process and shared by its executions.

    One provider per process, its SDK clients shared by the executions, so a turn does not pay for a new
    client, a new pool and a new TCP/TLS handshake with the provider: one client at prefork's one unit per
    process, one per `STREAMS_PER_PROVIDER_CLIENT` units at a threads pool's hundreds (`AnthropicProvider`
    says why). It is keyed by pid so a forked pool child never shares its parent's sockets: each builds its
    own on first use, after the fork. The SDK's client is safe to share between threads; the provider keeps
    no per-call state.
    """
    if settings.provider == "scripted":
        return ScriptedProvider(directive_script(RedisCounter(client), scripted_cues(settings.scripted_cues)))
    if settings.provider == "openai":
        from agent.provider.openai_provider import OpenAIProvider  # the SDK import is slow; only workers pay

        def make() -> Provider:
            return OpenAIProvider(idle_timeout=settings.stream_idle_timeout, shards=_shards())

    else:
        from agent.provider.anthropic_provider import AnthropicProvider

        def make() -> Provider:
            return AnthropicProvider(idle_timeout=settings.stream_idle_timeout, shards=_shards())

    return _providers.get((settings.provider, settings.stream_idle_timeout), make)


def _shards() -> int:
    return -(-_units[0] // STREAMS_PER_PROVIDER_CLIENT)


def backoff(settings: Settings) -> Backoff:
    return Backoff(scale=settings.backoff_scale)


@lru_cache(maxsize=8)
def _loaded(spec: str) -> tuple[Tool, ...]:
    """`BATON_TOOLS` loaded once per process (its modules imported, its schemas built)."""
    return tuple(load_tools(spec))


@lru_cache(maxsize=8)
def _chat_tools(spec: str) -> Mapping[str, Tool]:
    return MappingProxyType(by_name(_loaded(spec)))


def chat_tools(settings: Settings) -> Mapping[str, Tool]:
    """A chat turn's tools: the same read-only set for every turn of the process."""
    return _chat_tools(settings.tools)


def sandbox_policy(settings: Settings) -> SandboxPolicy | None:
    """The policy `run_command` runs under; None only for `BATON_SANDBOX=none`."""
    if settings.sandbox == "none":
        return None
    return SandboxPolicy(network=settings.sandbox_network == "on", run_as=settings.sandbox_uid)


def run_tools(settings: Settings, workspace: str) -> dict[str, Tool]:
    """A run's tools: its workspace's own (they are bound to its directory) and the shared `BATON_TOOLS`."""
    return by_name([*workspace_tools(workspace, sandbox=sandbox_policy(settings)), *_loaded(settings.tools)])
