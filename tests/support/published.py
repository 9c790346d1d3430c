"""Waiting for what workers publish of their agents (they do so at their first sweep, shortly after `ready`)."""

from __future__ import annotations

import time
from typing import Any


def wait_for_agents(client: Any, *names: str, timeout: float = 20.0) -> dict[str, Any]:
    """The published listing once every name is in it."""
    deadline = time.monotonic() + timeout
    while True:
        listed = {a["name"]: a for a in client.agents()["agents"]}
        if all(n in listed for n in names):
            return listed
        assert time.monotonic() < deadline, f"agents {names} not published; listed {sorted(listed)}"
        time.sleep(0.1)
