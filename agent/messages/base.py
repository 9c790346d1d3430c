"""The base of every transcript block: frozen, and tolerant of fields a newer version added."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Block(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")
