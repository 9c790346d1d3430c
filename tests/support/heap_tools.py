"""A read tool that tells what the worker process running it has frozen of its heap (`gc.get_freeze_count()`),
and which process that is. Loaded by workers through `BATON_TOOLS=tests.support.heap_tools:TOOLS`."""

from __future__ import annotations

import gc
import json
import os

from agent.tools import tool


@tool(effect="read")
def heap() -> str:
    """How many objects this process has frozen, and its pid."""
    return json.dumps({"frozen": gc.get_freeze_count(), "pid": os.getpid()})


TOOLS = [heap]
