"""The agent core: messages, providers, tools, the turn loop, rounds and history repair.

Nothing in this package imports Celery; Redis is reached only through the small protocols the
`tasks` package implements.
"""

from typing import Any

__all__ = ["Agent", "Price", "RateLimits"]


def __getattr__(name: str) -> Any:
    # `from agent import Agent` without importing the agents' room (and the tools behind it) for every
    # `agent.x` import: the core's modules import one another through this package.
    if name == "Agent":
        from agent.agents.definition import Agent

        return Agent
    if name == "RateLimits":
        from agent.agents.rate_limits import RateLimits

        return RateLimits
    if name == "Price":
        from agent.provider.price import Price

        return Price
    raise AttributeError(f"module 'agent' has no attribute {name!r}")
