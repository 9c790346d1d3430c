"""Agents that think, for tests/integration/test_thinking.py (`BATON_AGENTS=tests.support.agents_thinking:AGENTS`)."""

from __future__ import annotations

from agent import Agent
from tests.support.counting_tools import blocking_write, lookup, record_note

THINKER = Agent(name="thinker", thinking="high", tools=(lookup, record_note, blocking_write), max_tokens=8000)
PLAIN = Agent(name="plain", model="claude-other", tools=(lookup, record_note))

AGENTS = [THINKER, PLAIN]
