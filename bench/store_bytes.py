"""Redis memory per settled chat turn, key by key: what one one-tool-round turn leaves in the store.

A real worker, the real SDK against the fake API; each of N chats sends one message whose turn calls the `lookup`
tool once and then answers (two model steps, one tool round). Once every turn has settled and its live text has
been trimmed (BATON_LIVE_TEXT_RETENTION=0: the next sweep), each chat's keys are measured with MEMORY USAGE
(SAMPLES 0: every element) and grouped by kind; the store's `used_memory` growth per turn is printed beside it,
and so are the global index entries (listing, pending), which MEMORY USAGE of a chat's own keys does not see.

    PYTHONPATH=. python -m bench.store_bytes [N]
"""

from __future__ import annotations

import re
import sys
import time
from collections import defaultdict
from typing import Any

from bench._common import Stack, wait_for
from tests.support.fake_anthropic import Reply, text, tool_call

ANSWER = "The value is in; here is what it says, in a sentence or two of an ordinary answer."
CALL = tool_call("lookup", {"key": "invoice-2041"}, text="Let me look that up.")


def one_round(body: dict[str, Any], index: int) -> Reply:
    """Each conversation calls the tool once, then answers once its result is in."""
    blocks = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]]
    return text(ANSWER) if any(b.get("type") == "tool_result" for b in blocks) else CALL


def kind_of(key: str) -> str:
    """A key's kind: its name after the chat's part, ids replaced (`rec:*`, `journal:*:*`)."""
    rest = re.sub(r"^baton:\{[^}]*\}:(chat:[^:]+:)?", "", key)
    return re.sub(r":[^:]+", ":*", rest)


def measure(n: int) -> dict[str, float]:
    with Stack("store-bytes", handler=one_round, BATON_LIVE_TEXT_RETENTION="0", BATON_LEASE_TTL="4") as stack:
        stack.worker("b1", concurrency=4)
        client, r = stack.client(), stack.redis()
        stamp = int(time.time())
        r.memory_purge() if hasattr(r, "memory_purge") else None
        before = int(r.info("memory")["used_memory"])
        refs = [client.send_message(f"m{stamp}-{i}", "What does invoice 2041 say?") for i in range(n)]
        for ref in refs:
            assert client.wait(ref, timeout=120).status == "completed"
        wait_for(lambda: r.zcard("baton:deltas:trim") == 0, 30, interval=0.2, what="live text to be trimmed")
        time.sleep(2.5)  # a sweep past the last trim
        after = int(r.info("memory")["used_memory"])
        per_kind: dict[str, int] = defaultdict(int)
        counts: dict[str, int] = defaultdict(int)
        for key in r.scan_iter(match=f"baton:{{chat:m{stamp}-*", count=1000):
            name = key.decode()
            per_kind[kind_of(name)] += int(r.memory_usage(name, samples=0) or 0)
            counts[kind_of(name)] += 1
        out = {f"{k} ({counts[k] / n:.1f}/turn)": v / n for k, v in sorted(per_kind.items())}
        out["= the chat's own keys"] = sum(per_kind.values()) / n
        out["used_memory growth per turn (indexes and allocator included)"] = (after - before) / n
        return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    print(f"Redis bytes per settled one-tool-round chat turn ({n} chats, one turn each):")
    for name, value in measure(n).items():
        print(f"  {name:<70} {value:8.0f} B")


if __name__ == "__main__":
    main()
