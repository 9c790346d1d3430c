"""Builds the parts an execution needs from settings: the Redis client, provider and tool sets."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType

import redis

from agent.agents import Registry, Resolved
from agent.agents.registry import load_agents
from agent.errors import ToolDefinitionError
from agent.loop.policy import Backoff
from agent.per_process import PerProcess
from agent.provider.base import Endpoint, Provider
from agent.provider.rate_gate import LimitedProvider, endpoint_identity
from agent.provider.scripted import Cue, ScriptedProvider, directive_script, load_cues
from agent.tools import Tool, by_name, load_tools
from agent.tools.definition import stand_in_for
from agent.tools.mcp.config import ServerSpec, load_servers
from agent.tools.mcp.connections import Servers
from agent.tools.mcp.mapping import RemoteTool, ToolSet, baton_tool, server_of, stand_in, unavailable_text
from agent.tools.mcp.results import ToolValue
from agent.tools.mcp.sandboxed import RunLauncher
from agent.tools.sandbox import SandboxPolicy
from agent.tools.workspace import workspace_tools
from config.settings import Settings
from tasks.store import connect, keys
from tasks.store.rate_limits import RedisGate


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
    """The process's pooled client of the store (plain Redis, the master the Sentinels name, or a cluster)."""
    if not settings.sentinels and not settings.cluster:
        keys.use_cluster(False)
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


def build_provider(settings: Settings, client: redis.Redis, agent: Resolved | None = None) -> Provider:
    """The provider of an execution: Anthropic's or OpenAI's is built once per process and endpoint (the agent's
    provider, base URL and key variable) and shared by the executions that call it.

    One provider per endpoint per process, its SDK clients shared by the executions, so a turn does not pay for a
    new client, a new pool and a new TCP/TLS handshake with the provider: one client at prefork's one unit per
    process, one per `STREAMS_PER_PROVIDER_CLIENT` units at a threads pool's hundreds (`AnthropicProvider`
    says why). It is keyed by pid so a forked pool child never shares its parent's sockets: each builds its
    own on first use, after the fork. The SDK's client is safe to share between threads; the provider keeps
    no per-call state.
    """
    provider = agent.provider if agent is not None else settings.provider
    if provider == "scripted":
        return ScriptedProvider(directive_script(RedisCounter(client), scripted_cues(settings.scripted_cues)))
    endpoint = Endpoint(agent.base_url, agent.api_key_env) if agent is not None else Endpoint()
    gate = _shared_gate(settings, client, provider, endpoint)
    on_headers = gate.observe if gate is not None else None
    if provider == "openai":
        from agent.provider.openai_provider import OpenAIProvider  # the SDK import is slow; only workers pay

        def make() -> Provider:
            return OpenAIProvider(idle_timeout=settings.stream_idle_timeout, shards=_shards(), endpoint=endpoint,
                                  on_headers=on_headers)

    else:
        from agent.provider.anthropic_provider import AnthropicProvider

        def make() -> Provider:
            return AnthropicProvider(idle_timeout=settings.stream_idle_timeout, shards=_shards(), endpoint=endpoint,
                                     on_headers=on_headers)

    key = (provider, settings.stream_idle_timeout, endpoint.base_url, endpoint.api_key_env)
    shared = _providers.get(key, make)
    if gate is None:
        return shared
    # Every attempt waits for the endpoint's shared limits first (agent/provider/rate_gate.py).
    limits = agent.rate_limits if agent is not None else None
    return _providers.get(
        (*key, limits, settings.rate_wait, id(gate)),
        lambda: LimitedProvider(shared, gate, limits=limits, max_wait=settings.rate_wait),
    )


_gates: PerProcess[RedisGate] = PerProcess()


def gate_ahead(settings: Settings, client: redis.Redis | None, agent: Resolved) -> RedisGate | None:
    """The gate `build_provider` puts before `agent`'s provider, when its admission needs nothing of the request (the
    agent has no rate limits of its own): what the take may ask ahead (tasks/store/ahead.py). Else None."""
    if agent.provider == "scripted" or agent.rate_limits is not None:
        return None
    return _shared_gate(settings, client, agent.provider, Endpoint(agent.base_url, agent.api_key_env))


def _shared_gate(settings: Settings, client: redis.Redis | None, provider: str, endpoint: Endpoint) -> RedisGate | None:
    """The endpoint's shared rate-limit count; None with no store (a unit test's provider) or sharing off: each call
    then meets its provider's limits on its own."""
    if settings.rate_sharing != "on" or client is None:
        return None
    return _gate(client, endpoint_identity(provider, endpoint))


def _gate(client: redis.Redis, identity: str) -> RedisGate:
    """The shared rate-limit count of one endpoint, one per process (its scripts registered once)."""
    return _gates.get((id(client), identity), lambda: RedisGate(client, identity))


def _shards() -> int:
    return -(-_units[0] // STREAMS_PER_PROVIDER_CLIENT)


def backoff(settings: Settings) -> Backoff:
    return Backoff(scale=settings.backoff_scale)


def agents(settings: Settings) -> Registry:
    """The agents this process serves (`BATON_AGENTS`, else the one `default` agent of the settings), loaded and
    resolved once per process; an `AgentError` or a tool's load error says what is wrong."""
    return _registry(settings.agents, settings.provider, settings.model, settings.tools, settings.mcp_servers)


@lru_cache(maxsize=8)
def _registry(spec: str, provider: str, model: str, tools: str, mcp: str) -> Registry:
    servers = [s.name for s in mcp_specs(mcp)] if mcp else []
    if not spec:
        return Registry.of_settings(provider=provider, model=model, tools=python_tools(tools), servers=servers)
    return Registry.build(load_agents(spec), provider=provider, model=model, servers=servers)


def agent_python_tools(registry: Registry, agent: Resolved) -> list[Tool]:
    """`agent`'s Python tools with this worker's code. A definition recorded by another version (pinned) offers its
    tools as recorded (the same bytes to the model), each running this worker's code of that name (from any agent it
    serves); one whose code this worker lacks is a stand-in whose calls say it is no longer available."""
    mine = registry.get(agent.name)
    if mine is not None and mine.version == agent.version:
        return list(registry.python_tools(agent.name))
    code = {t.name: t for name in registry.agents for t in registry.python_tools(name)}
    code.update({t.name: t for t in registry.python_tools(agent.name)})
    out = []
    for spec in agent.tools:
        found = code.get(spec.name)
        if found is None:
            out.append(stand_in_for(spec.name, spec.description, spec.input_schema))
        elif found.description != spec.description or found.input_schema != spec.input_schema:
            out.append(dataclasses.replace(found, description=spec.description, input_schema=spec.input_schema))
        else:
            out.append(found)
    return out


def python_tools(spec: str) -> tuple[Tool, ...]:
    """`BATON_TOOLS` loaded (once per process) and checked: a duplicate name is a `ToolDefinitionError`."""
    loaded = _loaded(spec)
    by_name(loaded)
    return loaded


@lru_cache(maxsize=8)
def _loaded(spec: str) -> tuple[Tool, ...]:
    """`BATON_TOOLS` loaded once per process (its modules imported, its schemas built)."""
    return tuple(load_tools(spec))


def chat_tools(settings: Settings, agent: Resolved | None = None) -> Mapping[str, Tool]:
    """A chat turn's tools: its agent's (by default the fleet's default agent: `BATON_TOOLS` and every MCP server),
    its MCP servers' tools as they are listed now."""
    registry = agents(settings)
    agent = agent or registry.get(None)
    assert agent is not None  # a registry always has its default
    servers = mcp_servers(settings)
    mine = registry.get(agent.name)
    same = mine is not None and mine.version == agent.version
    if servers is None or not agent.mcp_servers:
        if same:
            return _agent_tools(registry, agent.name)
        return MappingProxyType(by_name(agent_python_tools(registry, agent)))
    python = agent_python_tools(registry, agent)
    named = set(agent.mcp_servers)
    remote = [t for t in mcp_tools(settings) if t.server in named]
    return _tool_set([*python, *remote], {name: servers for name in servers.specs if name in named})


@lru_cache(maxsize=32)
def _agent_tools(registry: Registry, name: str) -> Mapping[str, Tool]:
    """An agent's Python tools by name, built once per process (the common case: the unit runs this worker's own
    version of its agent)."""
    return MappingProxyType(by_name(registry.python_tools(name)))


def sandbox_policy(settings: Settings) -> SandboxPolicy | None:
    """The policy `run_command` runs under; None only for `BATON_SANDBOX=none`."""
    if settings.sandbox == "none":
        return None
    return SandboxPolicy(network=settings.sandbox_network == "on", run_as=settings.sandbox_uid)


def run_tools(
    settings: Settings, workspace: str, own: RunServers | None = None, agent: Resolved | None = None
) -> Mapping[str, Tool]:
    """A run's tools: its workspace's own (they are bound to its directory), its agent's Python tools (by default
    the fleet's default agent's: `BATON_TOOLS`), and its agent's MCP servers' tools: its own stdio servers' (`own`,
    in its sandbox) and the worker's for the rest."""
    registry = agents(settings)
    agent = agent or registry.get(None)
    assert agent is not None
    tools = [*workspace_tools(workspace, sandbox=sandbox_policy(settings)), *agent_python_tools(registry, agent)]
    shared = mcp_servers(settings)
    named = set(agent.mcp_servers)
    if shared is None or not named:
        return by_name(tools)
    sources = {name: shared for name in shared.specs if name in named}
    if own is not None:
        sources.update({name: own.servers for name in own.servers.specs if name in named})
        tools += [t for t in mcp_tools(settings) if t.server in named and t.server not in own.servers.specs]
        for name, listed in own.servers.listing().items():
            if name in named:
                tools += _as_tools(own.servers, name, listed, settings)
    else:
        tools += [t for t in mcp_tools(settings) if t.server in named]
    return _tool_set(tools, sources)


def _tool_set(tools: list[Tool], sources: Mapping[str, Servers]) -> ToolSet:
    """`tools` by name, and for `NAME__TOOL` of a configured server that does not offer it, a stand-in saying why."""

    def missing(name: str) -> Tool | None:
        found = server_of(name, sources)
        if found is None:
            return None
        server, tool = found
        where = sources[server]
        return stand_in(server, tool, unavailable_text(server, tool, where.errors.get(server), server in where.tools))

    return ToolSet(by_name(tools), missing)


@dataclass(frozen=True)
class RunServers:
    """A coding run's own stdio MCP servers, in its sandbox: started with its execution, closed when it ends."""

    servers: Servers
    launcher: RunLauncher

    def close(self, timeout: float) -> None:
        try:
            self.servers.close(timeout)
        finally:
            self.launcher.close()


def run_servers(settings: Settings, workspace: str, agent: Resolved | None = None) -> RunServers | None:
    """The stdio servers of a run's execution, launched in its sandbox (cwd its workspace, the sandbox's minimal
    environment plus each server's `env`); they start when its tools are listed. None when there is no stdio server,
    or under `BATON_SANDBOX=none`, where the worker's own serve the run as they serve chat turns."""
    policy = sandbox_policy(settings)
    if not settings.mcp_servers or policy is None:
        return None
    named = set(agent.mcp_servers) if agent is not None else None  # None: every server (the default agent's)
    stdio = tuple(
        s for s in mcp_specs(settings.mcp_servers) if s.transport == "stdio" and (named is None or s.name in named)
    )
    if not stdio:
        return None
    launcher = RunLauncher(workspace, policy)
    servers = Servers(
        stdio, call_timeout=settings.mcp_timeout, launch=launcher, closed_reason="its run's execution has ended"
    )
    return RunServers(servers, launcher)


def without_mcp(settings: Settings) -> Settings:
    """The settings with no MCP servers (what the master checks before the fork, starting none itself)."""
    return settings.model_copy(update={"mcp_servers": ""})


@lru_cache(maxsize=4)
def mcp_specs(path: str) -> tuple[ServerSpec, ...]:
    """`BATON_MCP_SERVERS` read and checked once per process (`McpConfigError` names what is wrong)."""
    return load_servers(path)


_mcp: PerProcess[Servers] = PerProcess()
_mcp_built: dict[tuple[int, str, str], tuple[tuple[RemoteTool, ...], tuple[Tool, ...]]] = {}
log = logging.getLogger("baton.mcp")


def mcp_servers(settings: Settings) -> Servers | None:
    """This process's connections to the MCP servers (made after a fork, in the process that calls them)."""
    if not settings.mcp_servers:
        return None
    specs = mcp_specs(settings.mcp_servers)
    return _mcp.get(
        (settings.mcp_servers, settings.mcp_timeout), lambda: Servers(specs, call_timeout=settings.mcp_timeout)
    )


def mcp_tools(settings: Settings) -> list[Tool]:
    """The MCP servers' tools as Baton tools (servers that are down started again first; one that cannot start
    offers the tools it listed last, whose calls then say it is unavailable)."""
    servers = mcp_servers(settings)
    if servers is None:
        return []
    out: list[Tool] = []
    for name, listed in servers.listing().items():
        key = (id(servers), name, settings.mcp_approval)
        cached = _mcp_built.get(key)
        if cached is None or cached[0] is not listed:  # rebuilt only when the server's list changed
            cached = _mcp_built[key] = (listed, tuple(_as_tools(servers, name, listed, settings)))
        out += cached[1]
    return out


def _as_tools(servers: Servers, name: str, listed: tuple[RemoteTool, ...], settings: Settings) -> list[Tool]:
    def call(tool: str, arguments: dict[str, object], key: str | None) -> ToolValue:
        return servers.call(name, tool, arguments, key)

    tools = []
    for remote in listed:
        try:
            tools.append(baton_tool(name, remote, settings.mcp_approval, call))
        except ToolDefinitionError as err:  # one bad tool must not take its server's others away
            log.warning("mcp: server %s: tool %r left out: %s", name, remote.name, err)
    return tools


def close_mcp(timeout: float) -> None:
    """Close this process's MCP sessions (stdio servers stopped) within `timeout`; a no-op when there are none."""
    made = _mcp.take_mine()
    for servers in made:
        servers.close(timeout)
