"""An agent on a model that binds its thinking to the prefix (the fake's `PRESERVED_THINKING`), before a deploy:
tests/integration/test_thinking_bound.py (`BATON_AGENTS=tests.support.agents_bound:AGENTS`); agents_bound_v2.py is
after it (new instructions; `upgrade=True` moves units in flight to it)."""

from __future__ import annotations

from agent import Agent
from tests.support.counting_tools import blocking_write, lookup

BOUND_V1 = "Think before each step. Version one."
BOUND = Agent(name="bound", model="claude-fable-5-1", instructions=BOUND_V1, thinking="high",
              tools=(lookup, blocking_write), upgrade=True)  # fmt: skip

AGENTS = [BOUND]
