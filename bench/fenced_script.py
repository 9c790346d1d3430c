"""What one fenced write costs inside Redis: the commands it runs, and the Lua around them.

A write of a chat turn's settle's shape (the reply appended to the transcript, the record's eight fields, the ending
event, the journal and live text dropped, the trim entry, the stop flag, the queue, the lease, the settled signal and
the read of the queue's head) under a real lease and `Fence`, `N` times on a private redis-server; `INFO
commandstats` splits each EVALSHA's time into its commands' own (HSET, XADD, ...) and the rest. Beside it, the same
keys and arguments into a script that returns at once: what Redis spends handing them to Lua before any of it runs.

    python -m bench.fenced_script
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import redis

from bench._common import Row, fmt, print_rows
from tasks.demo.embedded_redis import EmbeddedRedis
from tasks.store.fenced import Batch, Fence

N = 3000
LEASE = "baton:{chat:c1}:lease"


def settle_like(i: int) -> Batch:
    """A batch of the settle's shape (tasks/execution/settling.py), with values of a one-tool-round turn's size."""
    batch = Batch()
    reply = {"role": "assistant", "content": [{"type": "text", "text": "done: value-of-a " * 3}], "id": f"m{i}"}
    batch.add("RPUSH", "baton:{chat:c1}:transcript", json.dumps(reply))
    batch.hset("baton:{chat:c1}:rec:t1", {
        "status": "completed", "reply": "done: value-of-a", "failure": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, "attempts": 2}, "resumed": False,
        "waiting_reason": None, "approvals": [], "updated_at": time.time(),
    })  # fmt: skip
    batch.xadd("baton:{chat:c1}:events", json.dumps({"kind": "turn.completed", "chat_id": "c1", "turn_id": "t1"}))
    batch.add("DEL", "baton:{chat:c1}:journal:t1:0")
    batch.add("DEL", "baton:{chat:c1}:live:t1:0")
    batch.add("ZADD", "baton:deltas:trim", str(time.time() + 60), json.dumps(["chat:c1", f"t{i}", 1796524812000]))
    batch.delete_if("baton:{chat:c1}:stop", "t1", "*")
    batch.add("LREM", "baton:{chat:c1}:queue", "1", "t1")
    batch.add("DEL", LEASE)
    batch.add("ZREM", "baton:active", "chat:c1")
    batch.add("XADD", "baton:{chat:c1}:settled", "MAXLEN", "~", "100", "*", "u", "t1")
    batch.read("LINDEX", "baton:{chat:c1}:queue", "0")
    return batch


def _stats(r: redis.Redis) -> tuple[float, float]:
    """µs per EVALSHA, and µs of the commands it ran (every command but the lease's SET and EVALSHA itself)."""
    stats = r.info("commandstats")
    inner = sum(v["usec"] for k, v in stats.items() if k not in ("cmdstat_evalsha", "cmdstat_set"))
    return float(stats["cmdstat_evalsha"]["usec_per_call"]), inner / N


def main() -> list[Row]:
    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedRedis(Path(tmp) / "redis").start()
        try:
            r = redis.Redis.from_url(server.url)
            fence = Fence(r, LEASE, "token")
            for i in range(200):  # the script loaded, the keys there
                r.set(LEASE, "token")
                fence.commit(settle_like(i))
            r.config_resetstat()
            for i in range(N):
                r.set(LEASE, "token")
                fence.commit(settle_like(i))
            whole, inner = _stats(r)
            keys, args = fence._call(settle_like(0))
            at_once = r.register_script("return 1")
            at_once(keys=keys, args=args)
            r.config_resetstat()
            for _ in range(N):
                at_once(keys=keys, args=args)
            handed, _ = _stats(r)
        finally:
            server.stop()
    lua = whole - inner - handed
    print(f"  a settle's fenced write ({len(keys)} keys, {len(args)} arguments), {N} times: {fmt(whole)} µs in Redis "
          f"each; its commands {fmt(inner)} µs, handing its arguments to Lua {fmt(handed)} µs, the Lua between "
          f"{fmt(lua)} µs", flush=True)
    return [
        Row("a settle's fenced write, in Redis", whole, "µs", "—", "info"),
        Row("  of it, the commands it runs", inner, "µs", "—", "info"),
        Row("  of it, its keys and arguments handed to Lua", handed, "µs", "—", "info"),
        Row("  of it, the Lua between the commands", lua, "µs", "—", "info"),
    ]


if __name__ == "__main__":
    print_rows(main())
