"""What a unit runs with: an agent resolved against the worker's defaults, as plain JSON-able data, and its version.

A unit records the version (and the store keeps the definition under it) when it starts; a worker whose own
definition of that agent has another version runs the unit from the recorded one (pinned), so a deploy changes
no unit in the middle. The version is the first 12 hex digits of a SHA-256 of the canonical JSON of everything
that shapes what the model is asked or what its calls may do: provider, model and models, instructions, each
tool's name, description, schema and effect, the MCP servers named, the model settings and the endpoint (the
name of the key's variable, never the key). The queue, `upgrade`, the rate limits and the price are how the fleet
treats its units, not what they run, and are left out (a new price applies to units in flight without moving them).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from agent.agents.definition import Agent, Thinking
from agent.agents.rate_limits import RateLimits
from agent.provider.price import Price
from agent.tools.definition import Tool

VERSION_HEX = 12


@dataclass(frozen=True)
class ToolSpec:
    """A tool as a unit's definition records it: what the model is offered, and its effect."""

    name: str
    description: str
    input_schema: dict[str, Any]
    effect: str

    @classmethod
    def of(cls, tool: Tool) -> ToolSpec:
        return cls(tool.name, tool.description, tool.input_schema, tool.effect)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "effect": self.effect,
        }


@dataclass(frozen=True)
class Resolved:
    """An agent with every default filled in: what a unit records when it starts, and its version."""

    name: str
    provider: str
    model: str
    models: tuple[str, ...]
    instructions: str | None = None
    tools: tuple[ToolSpec, ...] = ()
    mcp_servers: tuple[str, ...] = ()
    max_tokens: int = 4096
    temperature: float | None = None
    thinking: Thinking = None
    base_url: str | None = None
    api_key_env: str | None = None
    queue: str | None = None
    upgrade: bool = False
    rate_limits: RateLimits | None = None
    price: Price | None = None
    version: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.version:
            object.__setattr__(self, "version", fingerprint(self.fingerprinted()))

    def fingerprinted(self) -> dict[str, Any]:
        """What the version covers (see the module)."""
        return {
            "provider": self.provider,
            "model": self.model,
            "models": list(self.models),
            "instructions": self.instructions,
            "tools": [t.as_dict() for t in self.tools],
            "mcp_servers": list(self.mcp_servers),
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "thinking": self.thinking,
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
        }

    def as_dict(self) -> dict[str, Any]:
        """The whole definition as JSON-able data (what the store keeps under the version)."""
        limits = self.rate_limits.model_dump() if self.rate_limits is not None else None
        return {"name": self.name, "version": self.version, **self.fingerprinted(), "queue": self.queue,
                "upgrade": self.upgrade, "rate_limits": limits,
                "price": self.price.model_dump() if self.price is not None else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Resolved:
        """A recorded definition read back; its version is the one it was recorded under."""
        return cls(
            name=data["name"],
            provider=data["provider"],
            model=data["model"],
            models=tuple(data["models"]),
            instructions=data.get("instructions"),
            tools=tuple(ToolSpec(**t) for t in data.get("tools", ())),
            mcp_servers=tuple(data.get("mcp_servers", ())),
            max_tokens=int(data.get("max_tokens", 4096)),
            temperature=data.get("temperature"),
            thinking=data.get("thinking"),
            base_url=data.get("base_url"),
            api_key_env=data.get("api_key_env"),
            queue=data.get("queue"),
            upgrade=bool(data.get("upgrade", False)),
            rate_limits=RateLimits(**data["rate_limits"]) if data.get("rate_limits") else None,
            price=Price.model_validate(data["price"]) if data.get("price") else None,
            version=data.get("version", ""),
        )

    def summary(self) -> dict[str, Any]:
        """What workers publish of it for clients to validate against (no instructions, no schemas)."""
        return {
            "name": self.name,
            "version": self.version,
            "provider": self.provider,
            "model": self.model,
            "models": list(self.models),
            "tools": [{"name": t.name, "effect": t.effect} for t in self.tools],
            "mcp_servers": list(self.mcp_servers),
            "queue": self.queue,
            "upgrade": self.upgrade,
        }


def fingerprint(definition: dict[str, Any]) -> str:
    """The first `VERSION_HEX` hex digits of the SHA-256 of `definition`'s canonical JSON."""
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:VERSION_HEX]


def resolve(agent: Agent, *, provider: str, model: str) -> Resolved:
    """`agent` with the worker's `provider` and `model` where it names none."""
    chosen = agent.model or model
    return Resolved(
        name=agent.name,
        provider=agent.provider or provider,
        model=chosen,
        models=tuple(agent.models) if agent.models is not None else (chosen,),
        instructions=agent.instructions,
        tools=tuple(ToolSpec.of(t) for t in agent.tools),
        mcp_servers=tuple(agent.mcp_servers),
        max_tokens=agent.max_tokens,
        temperature=agent.temperature,
        thinking=agent.thinking,
        base_url=agent.base_url,
        api_key_env=agent.api_key_env,
        queue=agent.queue,
        upgrade=agent.upgrade,
        rate_limits=agent.rate_limits,
        price=agent.price,
    )
