"""What tracing costs a turn: bench.naive_loop's chat turn (the real `anthropic` SDK against the fake API, one round
of the no-I/O `peek` tool) on a worker without the `OTEL_*` variables and on one exporting to a local OTLP/HTTP
receiver (batch exporter), same run.

The two workers serve a queue each and the turns alternate between them, so machine noise hits both alike; a turn
is timed from `send_message` to `wait` returning it completed. The traced worker's batch exporter sends every
second (`OTEL_BSP_SCHEDULE_DELAY=1000`; the SDK's default, 5 s, would send nothing during a phase of a few seconds),
so its exports run among the timed turns, and each phase ends only once every one of its turns' spans has arrived.
Also timed: the core's hooks with tracing off (the no-op facade), per turn's worth of calls, in this process.
"""

from __future__ import annotations

import time
import uuid

import psutil

from agent.messages import ToolUseBlock
from agent.provider.base import ProviderRequest
from agent.telemetry import telemetry
from bench._common import Row, Stack, fmt, judge, median, print_rows
from tests.support.fake_anthropic import Script, text, tool_call
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.processes import Worker

N = 80
WARMUP = 5
PHASES = 4


def replies(n: int) -> Script:
    """A tool round then an answer, for every turn of the run (both workers draw from one script)."""
    return Script([r for _ in range(n) for r in (tool_call("peek", {"key": "a"}), text("found"))])


def hooks_off_ns(rounds: int = 200_000) -> float:
    """Nanoseconds of one turn's hook calls with tracing off: two attempts, a tool, a replayed step."""
    request = ProviderRequest(model="m", messages=[])
    call = ToolUseBlock(id="t", name="lookup", input={})
    started = time.perf_counter_ns()
    for _ in range(rounds):
        for number in (1, 2):
            with telemetry().attempt(None, request, number) as traced:  # type: ignore[arg-type]
                traced.answered(None)  # type: ignore[arg-type]
        with telemetry().tool(call, None) as traced:
            traced.ran(None)
        telemetry().replayed("model:0")
    return (time.perf_counter_ns() - started) / rounds


def cpu_seconds(worker: Worker) -> float:
    """CPU time of a worker's process tree so far (main process and pool children, every thread)."""
    assert worker.proc is not None
    root = psutil.Process(worker.proc.pid)
    return sum(p.cpu_times().user + p.cpu_times().system for p in [root, *root.children()])


Phase = tuple[tuple[list[float], list[float]], tuple[float, float]]


def phase(receiver: OtlpReceiver, n: int, traced: tuple[bool, bool]) -> Phase:
    """Turns alternating between two workers (each on its queue; `traced` says which exports): the (first's,
    second's) latencies in seconds, and each worker's CPU seconds over its turns (export included: the phase
    waits for the spans before it reads them)."""
    handler = replies(2 * (n + WARMUP) + 4)
    with Stack("otel", handler=handler, BATON_TOOLS="bench.tools:TOOLS") as stack:
        queues = (stack.queue, f"{stack.queue}-2")
        workers = [
            stack.worker(name, concurrency=2, BATON_QUEUE=queue, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url if on else "",
                         OTEL_BSP_SCHEDULE_DELAY="1000")
            for name, queue, on in zip(("one", "two"), queues, traced, strict=True)
        ]
        before = len(receiver.spans("invoke_agent"))
        clients = [stack.client(BATON_QUEUE=queue) for queue in queues]
        prefix = f"otel{uuid.uuid4().hex[:6]}"

        def turn(k: int, i: int) -> float:
            client = clients[k]
            started = time.perf_counter()
            result = client.wait(client.send_message(f"{prefix}-{k}-{i}", "look a up"), timeout=30)
            elapsed = time.perf_counter() - started
            if result.status != "completed":
                raise RuntimeError(f"turn {i} ended {result.status}: {result.failure}")
            return elapsed

        for i in range(WARMUP):
            turn(0, -1 - i)
            turn(1, -1 - i)
        out: tuple[list[float], list[float]] = ([], [])
        cpu = [cpu_seconds(w) for w in workers]
        for i in range(n):
            for k in ((0, 1) if i % 2 else (1, 0)):  # which goes first alternates too
                out[k].append(turn(k, i))
        if any(traced):  # the exports happened while the worker lived, or the figure would not count them
            expected = before + n + WARMUP
            if not receiver.wait_for(lambda: len(receiver.spans("invoke_agent")) >= expected, 15):
                raise RuntimeError(f"{len(receiver.spans('invoke_agent')) - before} of {n + WARMUP} turns' spans "
                                   "arrived at the receiver")
        used = (cpu_seconds(workers[0]) - cpu[0], cpu_seconds(workers[1]) - cpu[1])
        return out, used


def main(n: int = N, *, traced: bool = True, phases: int = PHASES) -> list[Row]:
    """`phases` phases, the traced worker swapped between each, so a bias between the two workers of a phase (the
    A/A run, `--aa`, reads it: both untraced) falls on both sides as often. `traced=False`: neither exports."""
    receiver = OtlpReceiver().start()
    try:
        results = [phase(receiver, n, (False, traced) if p % 2 == 0 else (traced, False)) for p in range(phases)]
        exported = len(receiver.spans())
    finally:
        receiver.stop()
    runs = [latencies for latencies, _ in results]
    on_cpu = sum(used[1 if p % 2 == 0 else 0] for p, (_, used) in enumerate(results)) / (phases * n) * 1000
    off_cpu = sum(used[0 if p % 2 == 0 else 1] for p, (_, used) in enumerate(results)) / (phases * n) * 1000
    # Each phase's on ÷ off, averaged: a machine whose speed drifts between phases would otherwise make a bimodal
    # pool whose medians compare nothing.
    on_ms = [median(run[1 if p % 2 == 0 else 0]) * 1000 for p, run in enumerate(runs)]
    off_ms = [median(run[0 if p % 2 == 0 else 1]) * 1000 for p, run in enumerate(runs)]
    ratios = [on / off for on, off in zip(on_ms, off_ms, strict=True)]
    overhead = (sum(ratios) / len(ratios) - 1) * 100
    spread = f"phases {(min(ratios) - 1) * 100:+.1f} to {(max(ratios) - 1) * 100:+.1f}"
    hooks = hooks_off_ns()
    print(f"  off p50 {fmt(median(off_ms))} ms; on p50 {fmt(median(on_ms))} ms; {exported} spans received; "
          f"hooks off {hooks:.0f} ns a turn", flush=True)
    print("  on vs off by phase: " + ", ".join(f"{(r - 1) * 100:+.2f} %" for r in ratios), flush=True)
    return [
        Row("turn latency, tracing off (p50, median of the phases)", median(off_ms), "ms", "—", "info"),
        Row("turn latency, tracing on, batch OTLP/HTTP (p50, median of the phases)", median(on_ms), "ms", "—", "info"),
        Row(f"tracing on vs off (mean of {phases} phases' ratios)", overhead, "%", "≤ 3%",
            f"{judge(overhead, at_most=3.0)} ({spread})"),
        Row("worker CPU per turn, tracing off (every process and thread)", off_cpu, "ms", "—", "info"),
        Row("worker CPU per turn, tracing on (spans, metrics, export)", on_cpu, "ms", "—",
            f"info ({(on_cpu / off_cpu - 1) * 100:+.1f} %)"),
        Row("the core's hooks with tracing off, per turn", hooks / 1000, "µs", "—", "info"),
    ]


if __name__ == "__main__":
    import sys

    print_rows(main(traced="--aa" not in sys.argv))
