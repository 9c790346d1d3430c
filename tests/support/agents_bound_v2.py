"""agents_bound.py after a deploy: the same agent with new instructions (tests/integration/test_thinking_bound.py)."""

from __future__ import annotations

from agent import Agent
from tests.support.counting_tools import blocking_write, lookup

BOUND_V2 = "Think before each step. Version two."
BOUND = Agent(name="bound", model="claude-fable-5-1", instructions=BOUND_V2, thinking="high",
              tools=(lookup, blocking_write), upgrade=True)  # fmt: skip

AGENTS = [BOUND]
