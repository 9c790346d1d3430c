"""Agents that think, for tests/integration/test_thinking.py (`BATON_AGENTS=tests.support.agents_thinking:AGENTS`)."""

from __future__ import annotations

import os

from agent import Agent
from tests.support.counting_tools import blocking_write, lookup, record_note

THINKER = Agent(name="thinker", thinking="high", tools=(lookup, record_note, blocking_write), max_tokens=8000)
PLAIN = Agent(name="plain", model="claude-other", tools=(lookup, record_note))

# Another provider: an OpenAI-compatible server of its own (`BATON_TEST_LOCAL_URL`), which cannot verify Anthropic's
# signed thinking.
ELSEWHERE = Agent(
    name="elsewhere",
    provider="openai",
    model="local-llm",
    base_url=os.environ.get("BATON_TEST_LOCAL_URL") or "http://127.0.0.1:9/v1",
    api_key_env="LOCAL_LLM_KEY",
    tools=(lookup, record_note),
)

AGENTS = [THINKER, PLAIN, ELSEWHERE]
