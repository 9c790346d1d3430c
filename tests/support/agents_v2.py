"""The fleet's agents after a deploy (tests/integration/test_agent_deploys.py); agents_v1.py is before it.

Loaded by workers through `BATON_AGENTS=tests.support.agents_v2:AGENTS`. `coder` and `upcoder` have new instructions
and no longer offer `lookup` (no agent here has its code); `retired` is gone; `extra` is new (the workers still on
agents_v1 do not serve it).
"""

from __future__ import annotations

from agent import Agent
from tests.support.counting_tools import record_note

CODER_V2 = "Coder instructions, version two."
UPCODER_V2 = "Upgrading coder instructions, version two."

CODER = Agent(name="coder", instructions=CODER_V2, tools=(record_note,))
UPCODER = Agent(name="upcoder", instructions=UPCODER_V2, tools=(record_note,), upgrade=True)
EXTRA = Agent(name="extra", instructions="An agent this deploy adds.")

AGENTS = [CODER, UPCODER, EXTRA]
