"""Agents for the integration tests of a fleet serving several (tests/integration/test_agents.py).

Loaded by workers through `BATON_AGENTS=tests.support.agents_fleet:AGENTS` (or `:WITHOUT_QUEUED`,
`:HELD_THEN_QUEUED`). The local
agent's endpoint comes from the worker's environment, as a product's would.
"""

from __future__ import annotations

import os

from agent import Agent
from tests.support.counting_tools import blocking_write, lookup

SUPPORT = Agent(
    name="support",
    instructions="You are Acme's billing assistant.",
    model="claude-a",
    models=("claude-a", "claude-b"),
    tools=(lookup,),
    max_tokens=1000,
    temperature=0.2,
)
TRIAGE = Agent(name="triage", instructions="Sort the question into a queue.", model="claude-cheap")
LOCAL = Agent(
    name="local",
    provider="openai",
    model="local-llm",
    base_url=os.environ.get("BATON_TEST_LOCAL_URL") or "http://127.0.0.1:9/v1",
    api_key_env="LOCAL_LLM_KEY",
    tools=(lookup,),
)
QUEUED = Agent(name="queued", instructions="Served on its own queue.", queue=os.environ.get("BATON_TEST_AGENT_QUEUE"))

AGENTS = [SUPPORT, TRIAGE, LOCAL, QUEUED]
WITHOUT_QUEUED = [SUPPORT, TRIAGE, LOCAL]
# A default agent whose write the test holds, beside `queued` (tests/integration/test_brokers.py).
HELD_THEN_QUEUED = [Agent(name="held", tools=(blocking_write,)), QUEUED]

# Definitions a worker must refuse at start (tests/integration/test_agents.py).
DUPLICATES = [SUPPORT, TRIAGE, SUPPORT]
UNKNOWN_SERVER = [Agent(name="crm-bot", mcp_servers=("crm",))]
