"""Provider requests per logical call under 30 % injected faults, against the expected 1/(1-p).

40 chat turns (one `lookup` tool round each: two logical provider calls per turn) through one worker
with the real SDK against the fake server. Each request is a fault with p = 0.3, half a dropped stream
(cut after a few events) and half an HTTP 529 (on the OpenAI edge its 503, `provider="openai"`), else the
right reply. The draw is seeded per (logical
call, attempt number), so the same calls fail however the worker interleaves them. A logical call is
one conversation state: the chat's first user text and the number of messages sent.
`BATON_BACKOFF_SCALE=0` (no waits; a 529 here carries no retry-after).
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any

from bench._common import Row, Stack, fmt, judge, print_rows
from tests.support.fake_anthropic import Fault, Reply, failing, text, tool_call
from tests.support.fake_anthropic_sse import first_user_text

P = 0.3
SEED = 20261129
TURNS = 40
BUDGET = 4  # BATON_RETRY_BUDGET's default, set explicitly below
DROP = Fault(kind="drop", after_events=3)
OVERLOADED = Fault(kind="http", status=529, message="Overloaded")
# How each provider says it is overloaded (both `provider_overloaded`, both replayed in the budget).
OVERLOADED_ON = {"anthropic": OVERLOADED,
                 "openai": Fault(kind="http", status=503, message="The server is overloaded or not ready yet.")}


class FaultyProvider:
    """The fake API's handler: the right reply for the conversation's state, or a seeded fault."""

    def __init__(self, p: float, seed: int, overloaded: Fault = OVERLOADED) -> None:
        self.p = p
        self.seed = seed
        self.overloaded = overloaded
        self.attempts: Counter[tuple[str, int]] = Counter()
        self.faults: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any], index: int) -> Reply:
        key = (first_user_text(body), len(body["messages"]))
        with self._lock:
            self.attempts[key] += 1
            attempt = self.attempts[key]
        rng = random.Random(f"{self.seed}:{key[0]}:{key[1]}:{attempt}")
        right = tool_call("lookup", {"key": f"k{index}"}) if key[1] == 1 else text("done")
        if rng.random() < self.p:
            fault = DROP if rng.random() < 0.5 else self.overloaded
            with self._lock:
                self.faults[fault.kind] += 1
            return failing(fault, like=right)
        return right


def main(turns: int = TURNS, p: float = P, provider_name: str = "anthropic") -> list[Row]:
    provider = FaultyProvider(p, SEED, OVERLOADED_ON[provider_name])
    with Stack("faults", handler=provider, provider=provider_name, BATON_RETRY_BUDGET=str(BUDGET)) as stack:
        assert stack.fake is not None
        stack.worker("w1", concurrency=2)
        client = stack.client()
        stamp = int(time.time())
        refs = [client.send_message(f"faults-{stamp}-{i}", f"look up key {i}") for i in range(turns)]
        results = [client.wait(ref, timeout=60) for ref in refs]
        auto_resumes = sum(
            1
            for ref in refs
            for e in client.events(ref.chat_id)
            if e.type == "turn.retry" and (e.model_extra or {}).get("auto_resume")
        )
        requests = stack.fake.request_count
        rejected = len(stack.fake.rejections)

    statuses = Counter(r.status for r in results)
    logical = len(provider.attempts)
    ratio = requests / logical
    expected = 1 / (1 - p)
    capped = sum(p**k for k in range(BUDGET))  # what a budget of BUDGET attempts allows on average
    worst = max(provider.attempts.values())
    billed = sum(r.usage["attempts"] if isinstance(r.usage, dict) else r.usage.attempts for r in results)
    print(f"  {requests} requests for {logical} logical calls ({dict(provider.faults)} faults, {rejected} rejected "
          f"by the fake's validation); turns {dict(statuses)}; {auto_resumes} auto-resumes; "
          f"attempts per call {dict(sorted(Counter(provider.attempts.values()).items()))}; "
          f"usage.attempts summed over turns {billed}", flush=True)
    return [
        Row(f"provider requests ÷ logical calls at p = {p:g}", ratio, "x",
            f"≈ {fmt(expected)} (1/(1-p); {fmt(capped)} with a budget of {BUDGET})",
            "meets" if abs(ratio - capped) <= 0.15 else "misses"),
        Row(f"max attempts of one logical call (BATON_RETRY_BUDGET={BUDGET})", float(worst), "attempts",
            f"≤ {BUDGET}", judge(worst, at_most=BUDGET)),
        Row(f"turns completed (of {turns})", float(statuses.get("completed", 0)), "turns", "—", "info"),
        Row("usage.attempts summed over turns ÷ requests the provider saw", billed / requests, "x", "1",
            "meets" if billed == requests else "misses"),
    ]


if __name__ == "__main__":
    print_rows(main())
