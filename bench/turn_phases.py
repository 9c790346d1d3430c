"""Where one turn's wall time goes in the pool child, step by step: the median of each stretch between two marks.

The same turn as `bench.naive_loop` (one `peek` round, then a streamed answer, the real `anthropic` SDK against the
fake Messages API), on a real worker at `-c 1 -l info` whose tools module marks the execution's steps
(`bench.phase_marks`): the take, the request's planning, each preflight (budgets and rate gate), each provider call,
each journal write, the tool round, the settle, and inside each the send of its Redis commands and the wait for
their reply. Turns alternate with the naive loop's on its own worker, whose task runtime (Celery's "succeeded in")
is printed beside Baton's. Prints every stretch, then three sums: the provider's calls, the waits for Redis, and
the rest (Baton's Python between them, the SDK's request building included).

Before that, the turn's critical path on both sides, by the wall clock from the client's send (`bench.arrivals`):
when the client's send returned, when the worker's main process had the task, when the pool child started it,
when the answer was written (Baton: the settle's write returned; naive: the result backend's write), and when the
client had it. The steps before the child's start are outside the pool child and outside the stretches below.
"""

from __future__ import annotations

import re
import statistics
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from bench import arrivals
from bench._common import Row, Stack, print_rows
from bench.naive_loop import PROMPT, naive_beside, one_tool_round

TURNS = 200
STEPS = ("the client's send returned", "the worker's main process had the task", "the pool child started it",
         "the answer was written", "the client had it")


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


def critical_path(stamps: list[tuple[float, float, float]], path: Path) -> list[float]:
    """The median ms from the client's send to each of `STEPS`: the client's own `stamps` (sent, send returned,
    had the answer) with the worker's arrival marks in `path` (`received`, `started`, `written` for each turn)."""
    kinds: dict[str, list[float]] = {"received": [], "started": [], "written": []}
    for _ in range(50):  # the naive side marks `written` after its write, so the last turn's may still be coming
        kinds = {"received": [], "started": [], "written": []}
        for line in path.read_text().splitlines():
            kind, at = line.split()
            kinds[kind].append(float(at))
        if all(len(found) >= len(stamps) for found in kinds.values()):
            break
        time.sleep(0.1)
    # and the warm-up's last turn's may come after the marks were cleared: the turns' own are the last ones
    kinds = {kind: found[-len(stamps):] for kind, found in kinds.items()}
    if any(len(found) != len(stamps) for found in kinds.values()):
        raise RuntimeError(f"arrival marks do not match the turns: { {k: len(v) for k, v in kinds.items()} }")
    columns = [[s[1] for s in stamps], kinds["received"], kinds["started"], kinds["written"], [s[2] for s in stamps]]
    return [statistics.median((at - s[0]) * 1000 for at, s in zip(column, stamps, strict=True)) for column in columns]


def main(turns: int = TURNS) -> list[Row]:
    with Stack("phases", handler=one_tool_round, BATON_TOOLS="bench.phase_marks:TOOLS") as stack:
        marks, came, came_naive = stack.tmp / "phases.txt", stack.tmp / "arrivals.txt", stack.tmp / "arrivals-naive.txt"
        stack.worker("w1", concurrency=1, BATON_BENCH_PHASES=str(marks), **{arrivals.VARIABLE: str(came)})
        client = stack.client()
        naive, queue, _ = naive_beside(stack, 1, NAIVE_APP="bench.naive_marks", **{arrivals.VARIABLE: str(came_naive)})
        stamp = uuid.uuid4().hex[:6]
        stamps: dict[str, list[tuple[float, float, float]]] = {"baton": [], "naive": []}
        for i in range(10 + turns):
            if i == 10:  # warm: connections, SDK clients, scripts loaded
                for path in (marks, came, came_naive):
                    path.write_text("")
                stamps = {"baton": [], "naive": []}
            sent = time.time()
            ref = client.send_message(f"ph-{stamp}-{i}", PROMPT)
            returned = time.time()
            result = client.wait(ref, timeout=30)
            stamps["baton"].append((sent, returned, time.time()))
            if result.status != "completed":
                raise RuntimeError(f"turn ended {result.status}: {result.failure}")
            sent = time.time()
            handle = naive.send_task("naive.turn", args=[f"phn-{stamp}-{i}", PROMPT], queue=queue)
            returned = time.time()
            handle.get(timeout=30)
            stamps["naive"].append((sent, returned, time.time()))
        naive.close()
        found, usual = stretches(marks)
        baton_ms, naive_ms = _runtimes(stack.tmp / "worker-w1.log", turns), _runtimes(stack.tmp / "worker-naive.log",
                                                                                      turns)
        path = {"baton": critical_path(stamps["baton"], came), "naive": critical_path(stamps["naive"], came_naive)}
    print(f"  the critical path, median ms from the client's send ({turns} turns a side, one at a time):", flush=True)
    print(f"    {'':<42} {'Baton':>7} {'naive':>7} {'Baton - naive':>14}", flush=True)
    for k, step in enumerate(STEPS):
        b, n = path["baton"][k], path["naive"][k]
        print(f"    {step:<42} {b:7.2f} {n:7.2f} {b - n:+14.2f}", flush=True)
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
    deltas = [path["baton"][k] - path["naive"][k] for k in range(len(STEPS))]
    return [
        Row("critical path, Baton - naive: the client's send", deltas[0], "ms", "—", "info"),
        Row("critical path, Baton - naive: send to the pool child's start", deltas[2] - deltas[0], "ms", "—", "info"),
        Row("critical path, Baton - naive: the child's start to the answer written", deltas[3] - deltas[2], "ms",
            "—", "info"),
        Row("critical path, Baton - naive: the answer written to the client having it", deltas[4] - deltas[3], "ms",
            "—", "info"),
        Row("Baton's task runtime, 1 tool round (Celery's, p50)", baton_ms, "ms", "—", "info (marks included)"),
        Row("the naive loop's task runtime (p50)", naive_ms, "ms", "—", "info"),
        Row("  of Baton's: the provider's two calls", provider, "ms", "—", "info"),
        Row("  of Baton's: waiting for Redis replies", redis, "ms", "—", "info"),
        Row("  of Baton's: the rest (Python between them)", total - provider - redis, "ms", "—", "info"),
    ]


if __name__ == "__main__":
    print_rows(main(int(sys.argv[1]) if len(sys.argv) > 1 else TURNS))
