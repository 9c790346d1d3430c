"""Listing chats and runs, newest activity first, a page at a time.

Each kind has an index, `keys.CHATS_BY_LAST` / `keys.RUNS_BY_LAST`, and each person one of their own
(`keys.user_index`): sorted sets, owner id -> last activity (unix s), written in the same script as the message
that is the activity (tasks/store/enqueue.py) or with the run's record. On a Redis Cluster every index is
`keys.SHARDS` keys (a unit's entry shares its slot); a page reads every shard's first `limit` entries before the
cursor in one pipeline and merges them, so a page costs O(limit) per shard, never O(all chats). The summaries are
read from the units' own records: two more pipelined round trips, whatever the page's size.

The order is (last activity, owner id) descending, the order Redis itself keeps a sorted set in, and a cursor
names the last item of a page, so paging while chats move to the top neither repeats nor skips one that did not
move. The functions here are pure; `Client` and `AsyncClient` do the I/O (tasks/client/core.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tasks.store import keys
from tasks.store.replies import score_text, text, text_or_none

Kind = Literal["chat", "run"]
LIMIT_MAX = 200
TITLE_CHARS = 80
# Entries with exactly the cursor's score are read again and dropped by id: this many per shard may share one
# score (times are microseconds apart; only a burst within one clock tick ties).
TIE_SLACK = 16


def cursor_score(score: str) -> str:
    """A score as a page's `next` names it: the shortest text of the same double (Redis reads it back exactly), with
    no `+` (a query string reads one as a space). redis-py 8.2 may hand a score over as `%.17g` (`1.79e+9`)."""
    return repr(float(score)).replace("e+", "e")


@dataclass(frozen=True)
class Cursor:
    score: str  # the same double as Redis's score (`cursor_score`): read back exactly
    owner_id: str

    def encode(self) -> str:
        return f"{self.score}~{self.owner_id}"

    @classmethod
    def decode(cls, raw: str) -> Cursor:
        """The cursor a page's `next` names; ValueError for anything else (the client says it is bad input)."""
        score, sep, owner_id = raw.partition("~")
        kind, _, ident = owner_id.partition(":")
        try:
            float(score)
        except ValueError:
            raise ValueError(f"before is not a page's next: {raw[:60]!r}") from None
        if not sep or kind not in ("chat", "run") or not keys.ID_PATTERN.match(ident):
            raise ValueError(f"before is not a page's next: {raw[:60]!r}")
        return cls(score, owner_id)

    def after(self, score: str, owner_id: str) -> bool:
        """Whether an entry comes after this cursor in the listing's order (older, or as old with a lower id)."""
        return (float(score), owner_id) < (float(self.score), self.owner_id)


def index_keys(kind: Kind, user: str | None) -> list[str]:
    """The keys a page of `kind` reads: every shard of the kind's index, or of the person's."""
    if user is not None:
        return keys.user_shards(kind, user)
    return keys.shards(keys.CHATS_BY_LAST if kind == "chat" else keys.RUNS_BY_LAST)


def merge(
    replies: Sequence[Sequence[tuple[Any, Any]]], limit: int, before: Cursor | None
) -> tuple[list[tuple[str, str]], str | None]:
    """The page's (owner id, score) entries from every shard's reply, and the next page's cursor (None: last page)."""
    entries = [(text(member), text(score)) for reply in replies for member, score in reply]
    if before is not None:
        entries = [(o, s) for o, s in entries if before.after(s, o)]
    entries.sort(key=lambda e: (float(e[1]), e[0]), reverse=True)
    page, more = entries[:limit], len(entries) > limit
    nxt = Cursor(cursor_score(page[-1][1]), page[-1][0]).encode() if more and page else None
    return page, nxt


def first_reads(owner_id: str) -> list[tuple[str, str, list[Any]]]:
    """What the first summary round trip asks of one owner: (command, key, args)."""
    if owner_id.startswith("chat:"):
        turns = keys.turns(owner_id)
        return [("LLEN", turns, []), ("LINDEX", turns, [0]), ("LINDEX", turns, [-1])]
    return []  # a run is its one record


SUMMARY_FIELDS = ("user", "text", "created_at", "status", "agent")


@dataclass(frozen=True)
class Located:
    owner_id: str
    turns: int
    first: str  # record key of the first unit (its user, title, creation)
    last: str  # and of the last (its status, agent)
    exists: bool = True


def locate(owner_id: str, replies: Sequence[Any]) -> Located:
    """Which records summarize `owner_id`, from its `first_reads` replies."""
    kind, _, ident = owner_id.partition(":")
    if kind == "run":
        rec = keys.record(owner_id, ident)
        return Located(owner_id, 1, rec, rec)
    n, first, last = int(replies[0] or 0), text_or_none(replies[1]), text_or_none(replies[2])
    if not n or first is None or last is None:
        return Located(owner_id, 0, "", "", exists=False)
    return Located(owner_id, n, keys.record(owner_id, first), keys.record(owner_id, last))


def title(raw: str) -> str:
    """The first user message's text (or the run's goal), its first `TITLE_CHARS` characters on one line."""
    return " ".join(raw.split())[:TITLE_CHARS]


def _field(raw: Any) -> Any:
    value = text_or_none(raw)
    return json.loads(value) if value is not None else None


@dataclass
class Summary:
    id: str
    user: str | None
    agent: str
    title: str
    created_at: float
    last_at: float
    status: str
    turns: int

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id, "user": self.user, "agent": self.agent, "title": self.title,
            "created_at": self.created_at, "last_at": self.last_at, "status": self.status, "turns": self.turns,
        }


def summary(at: Located, score: str, first: Sequence[Any], last: Sequence[Any]) -> Summary | None:
    """One item of a page, from the HMGET of `SUMMARY_FIELDS` on its first and last records (None: it is gone,
    deleted between the index read and this one)."""
    if not at.exists or first[1] is None or last[3] is None:
        return None
    agent = _field(last[4]) or _field(first[4]) or "default"
    return Summary(
        id=at.owner_id.partition(":")[2],
        user=_field(first[0]),
        agent=agent,
        title=title(_field(first[1]) or ""),
        created_at=float(_field(first[2]) or 0.0),
        last_at=float(score),
        status=_field(last[3]),
        turns=at.turns,
    )


@dataclass(frozen=True)
class Page:
    """A page of summaries, newest activity first: `.items` and `.next` (the `before` of the next page, or None)."""

    kind: Kind
    items: list[dict[str, Any]]
    next: str | None

    def public(self) -> dict[str, Any]:
        return {f"{self.kind}s": self.items, "next": self.next}


def zrange_kwargs(limit: int, before: Cursor | None) -> dict[str, Any]:
    """redis-py's `zrange` arguments of each shard's read (BYSCORE REV, scores as Redis wrote them)."""
    # One more than the page (so a last page is known as last), and the entries tied with the cursor read again.
    return {
        "start": before.score if before is not None else "+inf", "end": "-inf", "desc": True, "byscore": True,
        "withscores": True, "offset": 0, "num": limit + 1 + (TIE_SLACK if before else 0),
        "score_cast_func": score_text,
    }


def page_of(
    kind: Kind, entries: list[tuple[str, str]], located: list[Located], fields: list[Any], nxt: str | None
) -> Page:
    """The page from the index entries, where they were located and the records' fields read for them (two
    HMGETs per located owner that exists, in order)."""
    items: list[dict[str, Any]] = []
    replies = iter(fields)
    for (_, score), at in zip(entries, located, strict=True):
        if not at.exists:
            continue
        item = summary(at, score, next(replies), next(replies))
        if item is not None:
            items.append(item.public())
    return Page(kind, items, nxt)


def read_page(client: Any, kind: Kind, user: str | None, limit: int, before: str | None) -> Page:
    """A page of `kind`'s summaries (newest activity first) on a sync client: three pipelined round trips."""
    cursor = Cursor.decode(before) if before else None
    pipe = client.pipeline(transaction=False)
    for key in index_keys(kind, user):
        pipe.zrange(key, **zrange_kwargs(limit, cursor))
    entries, nxt = merge(pipe.execute(), limit, cursor)
    pipe = client.pipeline(transaction=False)
    for owner_id, _ in entries:
        for command, key, args in first_reads(owner_id):
            pipe.execute_command(command, key, *args)
    firsts = iter(pipe.execute() if len(pipe) else [])
    located = [locate(o, [next(firsts) for _ in first_reads(o)]) for o, _ in entries]
    pipe = client.pipeline(transaction=False)
    for at in located:
        if at.exists:
            pipe.hmget(at.first, SUMMARY_FIELDS)
            pipe.hmget(at.last, SUMMARY_FIELDS)
    return page_of(kind, entries, located, pipe.execute() if len(pipe) else [], nxt)


async def aread_page(client: Any, kind: Kind, user: str | None, limit: int, before: str | None) -> Page:
    """`read_page` on an asyncio client."""
    cursor = Cursor.decode(before) if before else None
    pipe = client.pipeline(transaction=False)
    for key in index_keys(kind, user):
        pipe.zrange(key, **zrange_kwargs(limit, cursor))
    entries, nxt = merge(await pipe.execute(), limit, cursor)
    pipe = client.pipeline(transaction=False)
    for owner_id, _ in entries:
        for command, key, args in first_reads(owner_id):
            pipe.execute_command(command, key, *args)
    firsts = iter(await pipe.execute() if len(pipe) else [])
    located = [locate(o, [next(firsts) for _ in first_reads(o)]) for o, _ in entries]
    pipe = client.pipeline(transaction=False)
    for at in located:
        if at.exists:
            pipe.hmget(at.first, SUMMARY_FIELDS)
            pipe.hmget(at.last, SUMMARY_FIELDS)
    return page_of(kind, entries, located, await pipe.execute() if len(pipe) else [], nxt)
