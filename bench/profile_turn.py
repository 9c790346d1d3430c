"""Where one turn's time goes, Baton beside the naive loop: `py-spy` samples each side's pool child while it serves
turns one after another, and each sample of its main thread is put down to what it was doing.

The same turn as `bench.naive_loop` (one `peek` round, then a streamed answer, the real `anthropic` SDK against the
fake Messages API), each side a real worker at `-c 1 -l info` so one pool child serves every turn. `py-spy record
--idle --threads` samples that child's main thread at 1 kHz, waits included (a pool child at `-c 2` is busy while it
waits for Redis or the provider: that wait is its throughput's), and each sample goes to the first of these that
its stack holds, leaf first:

- the provider call: the SDK, httpx and the SSE stream (the fake's own time shows as waiting in the socket);
- Redis, by the Baton function that sent the command: the take, the preflight (budgets and rate gate), the
  journal's fenced writes, the settle, the live text, the watcher; the naive loop's history read and append;
- Celery's own work in the child: the task protocol, the result backend, acks (`celery`, `kombu`, `billiard`);
- the rest of the unit's Python, Baton's loop or the naive loop's.

The time between turns, the child parked for its next task, is left out. `py-spy` is not a dependency of Baton
(`pip install py-spy`); without it this prints nothing and returns no rows. Sampling slows both sides alike; the
figures are shares of a turn, to read beside each other, not latencies.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path

import psutil

from bench._common import Row, Stack, print_rows
from bench.naive_loop import PROMPT, naive_beside, one_tool_round

TURNS = 300
RATE = 1000

# (category, what a frame's text holds): the first that matches, from the leaf up, names the sample.
_REDIS_SENDERS = [
    ("Redis: take (record, lease, start, transcript)", "(tasks/store/take.py"),
    ("Redis: preflight (budget reservation, rate gate)", "(tasks/store/preflight.py"),
    ("Redis: preflight (budget reservation, rate gate)", "(tasks/store/budgets.py"),
    ("Redis: preflight (budget reservation, rate gate)", "(tasks/store/rate_limits.py"),
    ("Redis: settle", "(tasks/execution/settling.py"),
    ("Redis: journal steps (fenced writes)", "(tasks/store/journal.py"),
    ("Redis: live text", "(tasks/execution/live"),
    ("Redis: watcher (stop and drain flags, lease)", "(tasks/execution/watcher.py"),
    ("Redis: naive history read and append", "(bench/naive_app.py"),
]
_IDLE = ("billiard/pool.py", "billiard/connection.py", "_recv", "poll (selectors.py")


def category(frames: list[str]) -> str | None:
    """What one sample of the main thread was doing (None: parked between turns)."""
    stack = ";".join(frames)
    in_unit = "(tasks/drivers/" in stack or "(bench/naive_app.py" in stack
    if not in_unit:
        if any(mark in stack for mark in _IDLE) and "execute_using_pool" not in stack and "trace_task" not in stack:
            return None
        return "Celery, kombu and billiard (task protocol, results, acks)"
    if any(("(redis/" in f) for f in frames):
        for frame in reversed(frames):
            for name, mark in _REDIS_SENDERS:
                if mark in frame:
                    return name
        return "Redis: other"
    if any(("(anthropic/" in f or "(httpx" in f or "(httpcore" in f or "(h11/" in f) for f in frames[-12:]):
        return "provider call (SDK, HTTP, SSE)"
    if any("(celery/" in f or "(kombu/" in f for f in frames[-4:]):
        return "Celery, kombu and billiard (task protocol, results, acks)"
    return OWN


def tally(path: Path, turns: int) -> Counter[str]:
    """ms per turn by category, from py-spy's raw output (`--threads`: the first frame names the thread)."""
    found: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not frames or "MainThread" not in frames[0] or not count.isdigit():
            continue
        name = category([re.sub(r":\d+\)$", ")", f) for f in frames[1:]])
        if name is not None:
            found[name] += int(count)
    return Counter({k: v * 1000 / RATE / turns for k, v in found.items()})


OWN = "the unit's own Python (loop, events, JSON)"
_PROJECT = re.compile(r"\((?:.*/)?((?:agent|tasks|config)/[^:)]*)\)")


def hotspots(path: Path, turns: int, top: int = 15) -> list[tuple[str, float, float]]:
    """Where the unit's own Python goes: (function, self ms, inclusive ms) a turn, by the project's functions.

    A sample's self time goes to the leaf-most frame of agent/, tasks/ or config/ (the library code it called
    counts as its); inclusive time to every project frame on the stack, once each."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        if not frames or "MainThread" not in frames[0] or not count.isdigit() or category(frames[1:]) != OWN:
            continue
        named = [f"{f.split(' (')[0]} ({m.group(1)})" for f in frames[1:] if (m := _PROJECT.search(f))]
        for library in ("logging", "pydantic", "json"):  # what the project's code spends in them, whatever called
            if any(f"/{library}/" in f or f"({library}/" in f for f in frames[1:]):
                inclusive[f"[{library}]"] += int(count)
        if named:
            own[named[-1]] += int(count)
            for name in set(named):
                inclusive[name] += int(count)
    scale = 1000 / RATE / turns
    spots = [(name, own[name] * scale, inclusive[name] * scale) for name, _ in own.most_common(top)]
    libraries = ("[logging]", "[pydantic]", "[json]")
    return spots + [(f"{lib} (any caller)", 0.0, inclusive[lib] * scale) for lib in libraries]


def record(pid: int, out: Path, run: object) -> None:
    spy = subprocess.Popen(
        ["py-spy", "record", "--pid", str(pid), "--idle", "--threads", "--format", "raw", "-r", str(RATE),
         "-o", str(out), "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # attached
    run()  # type: ignore[operator]
    spy.send_signal(2)
    spy.wait(30)


def main(turns: int = TURNS) -> list[Row]:
    if shutil.which("py-spy") is None:
        print("  py-spy is not installed (pip install py-spy): no profile", flush=True)
        return []
    with Stack("profile", handler=one_tool_round, BATON_TOOLS="bench.tools:TOOLS") as stack:
        worker = stack.worker("w1", concurrency=1)
        client = stack.client()
        naive, queue, naive_worker = naive_beside(stack, 1)
        stamp = uuid.uuid4().hex[:6]

        def baton(n: int, prefix: str) -> None:
            for i in range(n):
                result = client.wait(client.send_message(f"{prefix}-{stamp}-{i}", PROMPT), timeout=30)
                if result.status != "completed":
                    raise RuntimeError(f"turn ended {result.status}: {result.failure}")

        def loop(n: int, prefix: str) -> None:
            for i in range(n):
                naive.send_task("naive.turn", args=[f"{prefix}-{stamp}-{i}", PROMPT], queue=queue).get(timeout=30)

        baton(10, "warm-b")
        loop(10, "warm-n")
        child = {name: psutil.Process(w.proc.pid).children()[0].pid for name, w in (("baton", worker),
                                                                                  ("naive", naive_worker))
                 if w.proc is not None}
        record(child["baton"], stack.tmp / "baton.txt", lambda: baton(turns, "b"))
        record(child["naive"], stack.tmp / "naive.txt", lambda: loop(turns, "n"))
        sides = {"baton": tally(stack.tmp / "baton.txt", turns), "naive": tally(stack.tmp / "naive.txt", turns)}
        spots = hotspots(stack.tmp / "baton.txt", turns)
        naive.close()
    names = sorted(set(sides["baton"]) | set(sides["naive"]), key=lambda k: -(sides["baton"][k] + sides["naive"][k]))
    print(f"  the pool child's main thread per turn, {turns} turns one after another (ms of samples, py-spy at "
          f"{RATE} Hz; waits included, the time between turns left out):", flush=True)
    print(f"  {'what it was doing':<58} {'Baton':>8} {'naive':>8}", flush=True)
    for name in names:
        print(f"  {name:<58} {sides['baton'][name]:>8.2f} {sides['naive'][name]:>8.2f}", flush=True)
    totals = {side: sum(found.values()) for side, found in sides.items()}
    print(f"  {'total':<58} {totals['baton']:>8.2f} {totals['naive']:>8.2f}", flush=True)
    print("  Baton's own Python, by the project function nearest the leaf (ms a turn: self, inclusive):", flush=True)
    for name, self_ms, incl_ms in spots:
        print(f"    {self_ms:6.3f} {incl_ms:6.3f}  {name}", flush=True)
    return [
        *(Row(f"Baton, per turn: {name}", sides["baton"][name], "ms", "—", f"info (naive {sides['naive'][name]:.2f})")
          for name in names),
        Row("Baton ÷ naive, the pool child's time per turn (under the profiler)", totals["baton"] / totals["naive"],
            "x", "—", "info"),
    ]


if __name__ == "__main__":
    print_rows(main())
