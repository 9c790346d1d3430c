"""429s a rate-limited provider gives a fleet that shares its limits, and one whose workers each find out alone.

One run, two private stacks, the same load: a fake Messages API that takes 10 requests per 3 s window (a 429 with
`retry-after` past them, its `anthropic-ratelimit-requests-*` headers on every answer), 4 workers of 2 units each,
40 one-request chat turns sent at once. `BATON_RATE_SHARING=on` (the default: the headers and 429s shared through
the store, every attempt admitted by the endpoint's script first) against `off` (each worker's own replay honours
the `retry-after` of the 429 it met). Printed side by side: the 429s, the turns that did not complete, the wall
time, and the store scripts sharing adds to an attempt (its admission, once more per wait, and its answer's headers).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench._common import Row, Stack, command_counts, delta, judge, print_rows
from tests.support.fake_anthropic import text
from tests.support.fake_rate_limit import FixedWindow

WORKERS, CONCURRENCY, TURNS = 4, 2, 40
LIMIT, WINDOW = 10, 3.0


def measure(sharing: str, provider: str = "anthropic") -> dict[str, Any]:
    """Run the load on a fresh stack with sharing on or off; what the fake and the store saw."""
    with Stack(f"rates-{sharing}-{provider}", handler=lambda body, index: text("ok"), provider=provider,
               BATON_RATE_SHARING=sharing) as stack:
        assert stack.fake is not None
        for i in range(WORKERS):
            stack.worker(f"w{i}", concurrency=CONCURRENCY)
        client = stack.client()
        stack.fake.limiter = FixedWindow(LIMIT, WINDOW)
        before = command_counts(client.redis)
        start = time.monotonic()
        refs = [client.send_message(f"rl-{i}", f"turn {i}") for i in range(TURNS)]
        with ThreadPoolExecutor(16) as waiters:
            results = list(waiters.map(lambda ref: client.wait(ref, timeout=240), refs))
        wall = time.monotonic() - start
        used = delta(command_counts(client.redis), before)
        attempts = sum(r.usage.attempts for r in results)
        return {
            "refused": len(stack.fake.rate_refused),
            "failed": sum(r.status != "completed" for r in results),
            "wall": wall,
            "attempts": attempts,
            "evalsha_per_attempt": used.get("evalsha", 0) / max(1, attempts),
        }


def main() -> list[Row]:
    rows: list[Row] = []
    for provider in ("anthropic", "openai"):
        on, off = measure("on", provider), measure("off", provider)
        print(f"  {provider}: {TURNS} turns, {WORKERS} workers x {CONCURRENCY}, fake limit {LIMIT} per {WINDOW:g} s")
        print(f"  {'':28}{'shared':>10}{'each alone':>12}")
        for key, label in (("refused", "429s from the fake"), ("failed", "turns not completed"),
                           ("attempts", "provider attempts"), ("wall", "wall time (s)"),
                           ("evalsha_per_attempt", "store scripts per attempt")):
            print(f"  {label:28}{on[key]:>10.3g}{off[key]:>12.3g}", flush=True)
        rows += [
            Row(f"{provider}: 429s with the limits shared (40 turns, 4 workers)", on["refused"], "", "≤ a handful",
                judge(on["refused"], at_most=5)),
            Row(f"{provider}: 429s with each worker alone (same load, same run)", off["refused"], "", "", "info"),
            Row(f"{provider}: turns not completed with the limits shared", on["failed"], "", "0",
                judge(on["failed"], at_most=0)),
            Row(f"{provider}: wall time shared ÷ alone", on["wall"] / off["wall"], "x", "", "info"),
            # Every script a turn runs (its fenced writes too), shared minus alone: the admissions (one per attempt,
            # more while it waits) and the headers each answer shares.
            Row(f"{provider}: store scripts an attempt adds when shared", on["evalsha_per_attempt"]
                - off["evalsha_per_attempt"], "", "", "info"),
        ]
    return rows


if __name__ == "__main__":
    print_rows(main())
