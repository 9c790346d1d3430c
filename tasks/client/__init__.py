"""The Python client a web app calls: send, wait, retry, stop, read transcripts, events, runs and chats.

    sync.py           `Client`, synchronous
    async_client.py   `AsyncClient`, the same API as coroutines (async_base.py: its connections and publishing;
                      async_approvals.py: its approvals)
    core.py           the I/O-free core both share: validation, ids, errors, the settled tails
    publisher.py      enqueue a unit: the store's script, then the broker
    waiting.py        wait for a unit to settle from its signal stream
    attachments.py    files in a message, checked before anything is enqueued
    agent_pick.py     which agent a chat or run uses (agent_picker.py: the published agents it picks from)
    budgets.py        spend limits: set, read, clear
    kept.py           chats a product keeps: listing and deletion

Nothing here builds the worker's Celery app or its drivers: a web app and every CLI call import only this.
"""

from tasks.client.async_client import AsyncClient
from tasks.client.attachments import Attachment
from tasks.client.core import BY_MAX, Busy, NotFound, OnBusy, ValidationError
from tasks.client.sync import Client
from tasks.reach import Unavailable
from tasks.store.listing import Page
from tasks.store.records import RunRef, TurnRef

__all__ = [
    "BY_MAX",
    "AsyncClient",
    "Attachment",
    "Busy",
    "Client",
    "NotFound",
    "OnBusy",
    "Page",
    "RunRef",
    "TurnRef",
    "Unavailable",
    "ValidationError",
]
