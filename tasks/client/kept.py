"""What `Client` and `AsyncClient` share for chats and runs a product keeps, lists and deletes, free of I/O.

Beside tasks/client/core.py (the same "sans-I/O" core, for sending, waiting and deciding): the checks of a listing's
and an owner's arguments, the answers of `delete`, and the indexes a new run goes in.
"""

from __future__ import annotations

from typing import Any

from tasks.client.core import Busy, Kind, ValidationError
from tasks.store import keys
from tasks.store.deletion import Deleted
from tasks.store.listing import LIMIT_MAX, Cursor
from tasks.store.records import UnitRecord

USER_MAX = 200


def check_user(value: object) -> str | None:
    """Whose chat or run it is: None, or a name of 1-`USER_MAX` printable characters without blanks (an id of
    the app's own: a login, an email, a number)."""
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= USER_MAX or not value.isprintable() or " " in value:
        raise ValidationError(f"user must be 1-{USER_MAX} printable characters without blanks; got {value!r:.80}")
    return value


def check_limit(value: object) -> int:
    """A page's size: 1 to `listing.LIMIT_MAX` (a larger one is capped, as the contract says)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValidationError(f"limit must be a positive integer; got {value!r}")
    return min(value, LIMIT_MAX)


def page_args(kind: Kind, user: object, limit: object, before: object) -> tuple[str | None, int, str | None]:
    """A listing's checked arguments (`ValidationError` for a bad one, a `before` that is no page's `next` too)."""
    if before is not None:
        if not isinstance(before, str):
            raise ValidationError("before must be the next of a previous page")
        try:
            Cursor.decode(before)
        except ValueError as err:
            raise ValidationError(str(err)) from None
        if not before.partition("~")[2].startswith(f"{kind}:"):
            raise ValidationError(f"before is the next of a page of another kind than {kind}s")
    return check_user(user), check_limit(limit), before


def busy_to_delete(ident: str, unit: str) -> Busy:
    """A chat or run queued, running or waiting is not deleted without `stop=True`."""
    err = Busy(ident, unit)
    err.args = (f"{ident} is busy with {unit}: stop it first, or delete with stop=True",)
    return err


DELETE_WAIT = 10.0  # seconds `delete(stop=True)` waits for the unit to settle before leaving it to the sweep
DELETE_POLL = 0.2


def kind_of(owner_id: str) -> Kind:
    return "run" if owner_id.startswith("run:") else "chat"


def delete_stopping(ident: str) -> dict[str, Any]:
    """`delete(stop=True)` of a unit that has not settled yet: it will be deleted once it has (by the sweep)."""
    return {"id": ident, "deleted": False, "stopping": True}


def run_indexes(rec: UnitRecord) -> list[str]:
    """The listing indexes a new run goes in (scored by its start): everyone's, and its user's."""
    out = [keys.by_last(rec.owner_id)]
    if rec.user is not None:
        out.append(keys.user_index(rec.user, rec.owner_id))
    return out


def delete_answer(ident: str, done: Deleted) -> dict[str, Any]:
    """`{"id", "deleted"}`: False for an id that had nothing (never used, or already deleted)."""
    return {"id": ident, "deleted": done.deleted}


