"""Two checkouts' workers head to head on one stack: this checkout's Baton worker (A) against another's (B).

    git worktree add /tmp/baton-before HEAD~1
    python -m bench.ab_workers /tmp/baton-before                 # A: this tree, B: HEAD~1's
    python -m bench.ab_workers /tmp/baton-before --rounds 6 --turns 100

A cut of a few tenths of a millisecond a turn is smaller than what moves `bench.naive_loop`'s latency figure between
two runs of the same tree on a shared two-core machine (1.12x to 1.16x in one hour). Here both trees run in the same
minutes against the same Redis and fake API, so the machine's drift moves both alike. The turn is `bench.naive_loop`'s
(the real SDK, one `peek` round, then a streamed answer; both workers `-c 2 -l info`, each on its own queue), and
between Baton's turns the naive loop's three workers (streaming, `messages.create`, made durable) each run one, as in
`bench.naive_loop`'s second latency block: a Baton turn finds its processes as cold as it does there, which is where the
cuts of the last sessions went. In each cycle A and B go in turn, which of them first alternating. Each round prints
both medians; the figure is the median of the rounds' B ÷ A (below 1: B is faster).

It measures the workers (main process and pool children): this checkout's client sends to both. A change to the
client is measured by `bench.naive_loop` run from each tree in turn. Run it the other way round too (from B's tree,
naming A's): the same tree on both sides read 0.996, 0.9992 and 1.0096 in three runs of six rounds (2026-12-07).
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

from bench._common import Row, Stack, median, print_rows
from bench.naive_loop import naive_beside, one_tool_round, timed_baton_turn, timed_naive_turn

ROUNDS = 6
TURNS = 100  # cycles a round: each one turn of A, of B and of each naive loop
WARMUP = 10


def main(other: Path, rounds: int = ROUNDS, turns: int = TURNS) -> list[Row]:
    other = other.resolve()
    if not (other / "tasks" / "__init__.py").is_file():
        raise SystemExit(f"{other} is not a Baton checkout (no tasks/__init__.py)")
    with Stack("ab", handler=one_tool_round, BATON_TOOLS="bench.tools:TOOLS") as stack:
        naive, streaming, _ = naive_beside(stack, 2)
        _, create, _ = naive_beside(stack, 2, name="naive-create", NAIVE_STREAM="0")
        _, durable, _ = naive_beside(stack, 2, name="naive-safe", NAIVE_APP="bench.safe_naive_app")
        queue_a, queue_b = f"{stack.queue}-a", f"{stack.queue}-b"
        stack.worker("wa", concurrency=2, BATON_QUEUE=queue_a)
        stack.worker("wb", concurrency=2, repo=other, BATON_QUEUE=queue_b)
        clients = {"A": stack.client(BATON_QUEUE=queue_a), "B": stack.client(BATON_QUEUE=queue_b)}
        stamp = uuid.uuid4().hex[:6]

        def cycle(tag: str, i: int, seen: dict[str, list[float]]) -> None:
            for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
                seen[side].append(timed_baton_turn(clients[side], f"{tag}-{side}-{stamp}-{i}"))
                timed_naive_turn(naive, streaming, f"{tag}-n{side}-{stamp}-{i}")
            timed_naive_turn(naive, create, f"{tag}-c-{stamp}-{i}")
            timed_naive_turn(naive, durable, f"{tag}-d-{stamp}-{i}")

        for i in range(WARMUP):
            cycle("warm", i, {"A": [], "B": []})
        ratios, gaps = [], []
        for r in range(rounds):
            seen: dict[str, list[float]] = {"A": [], "B": []}
            for i in range(turns):
                cycle(f"r{r}", i, seen)
            a, b = median(seen["A"]) * 1000, median(seen["B"]) * 1000
            ratios.append(b / a)
            gaps.append(b - a)
            print(f"  round {r + 1}: A {a:.3f} ms, B {b:.3f} ms, B - A {b - a:+.3f} ms, B ÷ A {b / a:.4f}",
                  flush=True)
    faster = sum(ratio < 1 for ratio in ratios)
    return [
        Row("turn latency B ÷ A (median of the rounds)", median(ratios), "x",
            "—", f"info ({faster} of {rounds} rounds B faster; B: {other})"),
        Row("turn latency B - A (median of the rounds)", median(gaps), "ms", "—", "info"),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other", type=Path, help="the other checkout (B), e.g. a `git worktree` of an earlier commit")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--turns", type=int, default=TURNS, help="cycles a round")
    arguments = parser.parse_args()
    print_rows(main(arguments.other, arguments.rounds, arguments.turns))
