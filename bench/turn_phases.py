"""Where one turn's wall time goes in the pool child, step by step: the median of each stretch between two marks.

The same turn as `bench.naive_loop` (one `peek` round, then a streamed answer, the real `anthropic` SDK against the
fake Messages API), on a real worker at `-c 1 -l info` whose tools module marks the execution's steps
(`bench.phase_marks`): the take, the request's planning, each preflight (budgets and rate gate), each provider call,
each journal write, the tool round, the settle, and inside each the send of its Redis commands and the wait for
their reply. Turns alternate with the naive loop's on its own worker, whose task runtime (Celery's "succeeded in")
is printed beside Baton's. Prints every stretch, then three sums: the provider's calls, the waits for Redis, and
the rest (Baton's Python between them, the SDK's request building included).
"""

from __future__ import annotations

import re
import statistics
import sys
import uuid
from collections import Counter
from pathlib import Path

from bench._common import Row, Stack, print_rows
from bench.naive_loop import PROMPT, naive_beside, one_tool_round

TURNS = 200


def stretches(path: Path) -> tuple[list[tuple[str, float]], int]:
    """The most common sequence of marks (the usual turn), as (from -> to, median ms); and how many turns had it."""
    lines = path.read_text().splitlines()
    turns = [[(m.split("=")[0], float(m.split("=")[1])) for m in line.split()] for line in lines]
    usual, count = Counter(tuple(name for name, _ in turn) for turn in turns).most_common(1)[0]
    same = [turn for turn in turns if tuple(name for name, _ in turn) == usual]
    out = []
    for k in range(1, len(usual)):
        out.append((f"{usual[k - 1]} -> {usual[k]}", statistics.median(t[k][1] - t[k - 1][1] for t in same)))
    return out, count


def _runtimes(log: Path, last: int) -> float:
    runs = [float(x) for x in re.findall(r"succeeded in ([\d.e-]+)s", log.read_text(errors="replace"))]
    return statistics.median(runs[-last:]) * 1000


def main(turns: int = TURNS) -> list[Row]:
    with Stack("phases", handler=one_tool_round, BATON_TOOLS="bench.phase_marks:TOOLS") as stack:
        marks = stack.tmp / "phases.txt"
        stack.worker("w1", concurrency=1, BATON_BENCH_PHASES=str(marks))
        client = stack.client()
        naive, queue, _ = naive_beside(stack, 1)
        stamp = uuid.uuid4().hex[:6]
        for i in range(10 + turns):
            if i == 10:
                marks.write_text("")  # warm: connections, SDK clients, scripts loaded
            result = client.wait(client.send_message(f"ph-{stamp}-{i}", PROMPT), timeout=30)
            if result.status != "completed":
                raise RuntimeError(f"turn ended {result.status}: {result.failure}")
            naive.send_task("naive.turn", args=[f"phn-{stamp}-{i}", PROMPT], queue=queue).get(timeout=30)
        naive.close()
        found, usual = stretches(marks)
        baton_ms, naive_ms = _runtimes(stack.tmp / "worker-w1.log", turns), _runtimes(stack.tmp / "worker-naive.log",
                                                                                      turns)
    print(f"  the usual turn ({usual} of {turns}), median ms of each stretch between two marks in the pool child:")
    provider = redis = 0.0
    inside: str | None = None
    for name, ms in found:
        print(f"    {ms:7.3f}  {name}", flush=True)
        start, end = name.split(" -> ")
        if start == "provider<":
            inside = "provider"
        if inside == "provider":
            provider += ms
        elif start == "read<" and end == "read>":
            redis += ms
        if end == "provider>":
            inside = None
    total = sum(ms for _, ms in found)
    return [
        Row("Baton's task runtime, 1 tool round (Celery's, p50)", baton_ms, "ms", "—", "info (marks included)"),
        Row("the naive loop's task runtime (p50)", naive_ms, "ms", "—", "info"),
        Row("  of Baton's: the provider's two calls", provider, "ms", "—", "info"),
        Row("  of Baton's: waiting for Redis replies", redis, "ms", "—", "info"),
        Row("  of Baton's: the rest (Python between them)", total - provider - redis, "ms", "—", "info"),
    ]


if __name__ == "__main__":
    print_rows(main(int(sys.argv[1]) if len(sys.argv) > 1 else TURNS))
