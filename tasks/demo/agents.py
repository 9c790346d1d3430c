"""The demo's agents: two assistants in one fleet, with their own instructions and tools.

Workers get them with `BATON_AGENTS=tasks.demo.agents:AGENTS`. The first, the concierge, is the default every
other scenario runs on, so it has every demo tool; the note-taker is told something else and can only save notes.
"""

from __future__ import annotations

from agent import Agent
from tasks.demo.tools import TOOLS, save_note

CONCIERGE = Agent(
    name="concierge",
    instructions="You are the concierge: you look things up and take notes.",
    tools=tuple(TOOLS),
)
NOTETAKER = Agent(
    name="notetaker",
    instructions="You are the note-taker: you only save notes, you never look anything up.",
    tools=(save_note,),
)

AGENTS = [CONCIERGE, NOTETAKER]
