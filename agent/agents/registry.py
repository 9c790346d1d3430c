"""The agents a worker serves: loaded from `BATON_AGENTS` (or the one `default` agent of today's settings),
checked, resolved, and looked up by name."""

from __future__ import annotations

import importlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from agent.agents.definition import Agent, AgentError
from agent.agents.resolved import Resolved, resolve
from agent.tools.definition import Tool

DEFAULT_AGENT = "default"


@dataclass(frozen=True, eq=False)  # hashed by identity: one per process, a key of per-process caches
class Registry:
    """Resolved agents by name (the first is the default a unit gets when it names none), with each one's
    Python tools as this worker has them."""

    agents: Mapping[str, Resolved]
    tools: Mapping[str, tuple[Tool, ...]]
    default: str

    @classmethod
    def build(
        cls, agents: Sequence[Agent], *, provider: str, model: str, servers: Collection[str]
    ) -> Registry:
        """Resolve `agents` against the worker's defaults; a duplicate name or an MCP server that `servers` (the
        names in `BATON_MCP_SERVERS`) does not define is an `AgentError` naming the agent."""
        if not agents:
            raise AgentError("the list of agents is empty")
        resolved: dict[str, Resolved] = {}
        tools: dict[str, tuple[Tool, ...]] = {}
        for agent in agents:
            if agent.name in resolved:
                raise AgentError(f"two agents are named {agent.name!r}")
            unknown = [s for s in agent.mcp_servers if s not in servers]
            if unknown:
                raise AgentError(
                    f"agent {agent.name!r} names MCP server {unknown[0]!r}, which BATON_MCP_SERVERS does not define"
                )
            resolved[agent.name] = resolve(agent, provider=provider, model=model)
            refused = refused_setting(resolved[agent.name])
            if refused is not None:
                raise AgentError(f"agent {agent.name!r}: {refused}")
            tools[agent.name] = tuple(agent.tools)
        disagreeing = disagreeing_limits(resolved.values())
        if disagreeing is not None:
            raise AgentError(disagreeing)
        return cls(resolved, tools, agents[0].name)

    @classmethod
    def of_settings(cls, *, provider: str, model: str, tools: Iterable[Tool], servers: Sequence[str]) -> Registry:
        """The one agent of a fleet without `BATON_AGENTS`: today's settings, every MCP server, no instructions."""
        default = Agent(name=DEFAULT_AGENT, tools=tuple(tools), mcp_servers=tuple(servers))
        return cls.build([default], provider=provider, model=model, servers=servers)

    def get(self, name: str | None) -> Resolved | None:
        """The agent called `name` (None: the default), or None when this worker does not serve it."""
        return self.agents.get(name or self.default)

    def python_tools(self, name: str) -> tuple[Tool, ...]:
        return self.tools.get(name, ())


def refused_setting(agent: Resolved) -> str | None:
    """What the agent's provider would refuse in every request (said at start, not on every turn), or None."""
    if agent.thinking is None:
        return None
    if agent.provider == "anthropic" and agent.temperature is not None and agent.temperature != 1:
        return "the Messages API refuses a temperature other than 1 with thinking on; leave temperature unset"
    if agent.provider == "openai" and isinstance(agent.thinking, int):
        return ("an OpenAI-compatible API takes thinking as 'low', 'medium' or 'high' (reasoning_effort), not a "
                "number of tokens")
    return None


def disagreeing_limits(agents: Iterable[Resolved]) -> str | None:
    """What is wrong when two agents call one endpoint (provider, base URL, key variable, model) with different
    `rate_limits`, or None: the fleet keeps one count per endpoint, which one set of limits must govern."""
    seen: dict[tuple[str, str | None, str | None, str], Resolved] = {}
    for agent in agents:
        for model in dict.fromkeys((agent.model, *agent.models)):
            endpoint = (agent.provider, agent.base_url, agent.api_key_env, model)
            first = seen.setdefault(endpoint, agent)
            if first.rate_limits != agent.rate_limits:
                return (f"agents {first.name!r} and {agent.name!r} call one endpoint ({agent.provider}, model "
                        f"{model!r}) with different rate_limits; agents on one endpoint must agree")
    return None


def load_agents(spec: str) -> list[Agent]:
    """`module:attribute` naming a list of `Agent`s, imported (an `AgentError` says what is wrong)."""
    module_name, _, attribute = spec.strip().partition(":")
    if not module_name or not attribute:
        raise AgentError(f"{spec!r} is not of the form module:attribute")
    try:
        value = getattr(importlib.import_module(module_name), attribute)
    except ValidationError as err:  # an Agent(...) at import time that its own checks refuse
        raise AgentError(f"{spec!r} defines an invalid agent: {err}") from err
    except (ImportError, AttributeError) as err:
        raise AgentError(f"{spec!r} cannot be loaded: {err}") from err
    items = list(value) if isinstance(value, list | tuple) else [value]
    for item in items:
        if not isinstance(item, Agent):
            raise AgentError(f"{spec!r} holds {item!r}, which is not an Agent")
    return items
