"""The fleet's agents before a deploy (tests/integration/test_agent_deploys.py); agents_v2.py is after it.

Loaded by workers through `BATON_AGENTS=tests.support.agents_v1:AGENTS`. `coder` is pinned (the default), `upcoder`
moves its units to a new version (`upgrade=True`); both offer `lookup`, which the next version drops (and no agent
of agents_v2 has its code). `retired` is an agent the deploy removes.
"""

from __future__ import annotations

from agent import Agent
from tests.support.counting_tools import lookup, record_note

CODER_V1 = "Coder instructions, version one."
UPCODER_V1 = "Upgrading coder instructions, version one."

CODER = Agent(name="coder", instructions=CODER_V1, tools=(record_note, lookup))
UPCODER = Agent(name="upcoder", instructions=UPCODER_V1, tools=(record_note, lookup), upgrade=True)
RETIRED = Agent(name="retired", instructions="An agent the next deploy removes.")

AGENTS = [CODER, UPCODER, RETIRED]
