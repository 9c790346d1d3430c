"""A fenced batch's ops with what the same atomic write would overwrite taken out.

A batch runs in one Lua script, so nothing outside it sees the state between two of its ops; only its own later
ops can. The loop's last step rides with the settle (`Fence.hold`), and so its journal entry and live-text marker
are written and then deleted by the same script, and the record gets two HSETs. Those writes cost the server
commands and carry the step's whole content for nothing. `compacted` drops a write to a key that a later `DEL` of
the key undoes, and joins HSETs of one key into one, whenever no op between them touches that key otherwise.

An op is `[command, key index, *args]` (`Batch.ops`); ops of one key index are ops of one key.
"""

from __future__ import annotations

from typing import Any

# Commands whose only effect is a write to their own key and whose reply nobody reads (a read is written `=…`):
# a later DEL of that key makes them moot.
_OVERWRITTEN_BY_DEL = frozenset(
    {"HSET", "HDEL", "SET", "PEXPIRE", "EXPIRE", "RPUSH", "LPUSH", "LTRIM", "LREM", "ZADD", "ZREM", "XADD", "DEL"}
)


def compacted(ops: list[list[Any]]) -> list[list[Any]]:
    """`ops` without the writes a later op of the same batch overwrites, in the order the rest ran.

    A joined HSET runs where the last of its HSETs ran (so a fill marker in it is filled as late as before), with
    the fields in first-written order and each field's last value.
    """
    out: list[list[Any] | None] = []
    moot: dict[Any, list[int]] = {}  # key -> positions in `out` of writes a DEL of it would make moot
    last_hset: dict[Any, int] = {}  # key -> position in `out` of its HSET, while only HSETs of it followed
    for op in ops:
        command, key = op[0], op[1]
        if command == "DEL" and len(op) == 2:
            for at in moot.pop(key, []):
                out[at] = None
            last_hset.pop(key, None)
        elif command == "HSET" and key in last_hset:
            earlier = out[last_hset[key]]
            assert earlier is not None
            out[last_hset[key]] = None
            fields = dict(zip(earlier[2::2], earlier[3::2], strict=True))
            fields.update(zip(op[2::2], op[3::2], strict=True))
            op = [command, key, *(part for pair in fields.items() for part in pair)]
        elif command != "HSET":
            last_hset.pop(key, None)
        if command not in _OVERWRITTEN_BY_DEL:
            moot.pop(key, None)  # a read, or a write that depends on the key's state: what came before it counts
        out.append(op)
        if command in _OVERWRITTEN_BY_DEL:
            moot.setdefault(key, []).append(len(out) - 1)
        if command == "HSET":
            last_hset[key] = len(out) - 1
    return [op for op in out if op is not None]
