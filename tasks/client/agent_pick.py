"""Which agent and model a send names, checked against what the workers publish: a pure decision both clients make
(their cached reads of the published list are tasks/client/agent_picker.py)."""

from __future__ import annotations

import re
from typing import Any

from tasks.client.core import AgentPick, ValidationError
from tasks.store.agents import Published

# A client reads what the workers publish at most this often: a send then costs no read of its own. An unknown name
# (an agent a deploy just added) reads it again before it is refused.
AGENTS_FRESH_SECONDS = 5.0
AGENT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def needs_listing(agent: object, model: object) -> bool:
    """Whether a send must look at what the workers publish: it names an agent or a model."""
    return agent is not None or model is not None


def pick_agent(listed: list[Published], agent: object, model: object, chat_agent: str | None = None) -> AgentPick:
    """Check a caller's `agent` and `model` against the published agents (`ValidationError` naming what is allowed).
    `chat_agent`: the chat's agent, which a turn naming none keeps (None: a new chat, or one never started)."""
    if agent is not None and (not isinstance(agent, str) or not AGENT_NAME.match(agent)):
        raise ValidationError(f"agent must be 1-64 characters of letters, digits, '.', '_' or '-'; got {agent!r}")
    if model is not None and (not isinstance(model, str) or not model or len(model) > 200):
        raise ValidationError(f"model must be a model name of at most 200 characters; got {model!r}")
    by_name = {p.name: p for p in listed}
    served = ", ".join(by_name) or "none (no worker has published its agents)"
    if agent is not None and agent not in by_name:
        raise ValidationError(f"unknown agent {agent!r}; the workers serve: {served}")
    default = next((p for p in listed if p.default), None)
    name = agent or chat_agent or (default.name if default is not None else None)
    entry = by_name.get(name) if name is not None else None
    if model is not None:
        if entry is None:
            raise ValidationError(f"model {model!r} cannot be checked: agent {name or 'default'!r} is not served now")
        if model not in entry.models:
            raise ValidationError(f"model {model!r} is not one agent {entry.name!r} allows: {', '.join(entry.models)}")
    queue = entry.queue if entry is not None and (agent is not None or chat_agent is None) else None
    return AgentPick(agent=agent, model=model, queue=queue)


def agents_answer(listed: list[Published]) -> dict[str, Any]:
    """What `c.agents()` and `baton agents --json` answer."""
    return {"agents": [p.public() for p in listed]}
