"""Agents: what a product defines (instructions, model, tools, settings), resolved and versioned per unit.

`Agent` is the definition a product writes; `Resolved` is what a unit records when it starts and keeps across
executions (its version a fingerprint of it); `Registry` is the set a worker serves. See CONTRACT.md, "Agents".
"""

from agent.agents.definition import Agent, AgentError
from agent.agents.registry import Registry
from agent.agents.resolved import Resolved, ToolSpec

__all__ = ["Agent", "AgentError", "Registry", "Resolved", "ToolSpec"]
