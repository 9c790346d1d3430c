"""The OpenAI edge beside the Anthropic one, in one run: the same three measurements on each provider.

For each provider, its real SDK in Baton's workers against its fake API over HTTP (connections kept alive, as the
real APIs do), driven by the same handlers:

- turn latency (p50, one tool round, a fresh chat per turn, the sides alternating) ÷ the streaming naive loop
  written for that provider's SDK, each as its own worker on the same Redis: `bench.naive_app` with
  NAIVE_STREAM=1 (`messages.stream`); `bench.naive_openai_app` folding `create(stream=True)`'s chunks by hand
  (the goal's baseline, the cheaper one) and, for information, with the SDK's `chat.completions.stream` helper;
- provider requests ÷ logical calls at 30 % injected faults (`bench.faults`: half dropped streams, half the
  provider's overloaded status, 529 or 503), against 1/(1-p) capped by the retry budget;
- the live-text delta, provider chunk → browser-facing SSE delta, p50 and p99 (`bench.live_text`).
"""

from __future__ import annotations

import uuid

from celery import Celery

from bench import faults, live_text
from bench._common import Row, Stack, fmt, judge, median, print_rows
from bench.naive_loop import naive_beside, one_tool_round, timed_baton_turn, timed_naive_turn

PROVIDERS = ("anthropic", "openai")
NAIVE_APPS = {"anthropic": "bench.naive_app", "openai": "bench.naive_openai_app"}
N = 40
WARMUP = 5
PROMPT = "look up key a, then answer"
LATENCY_GOAL = 1.15  # issue 27: Baton's turn on each edge ÷ that SDK's streaming naive loop


# Each provider's streaming naive loops: (label, app module, extra env); the first is the goal's baseline.
NAIVE_LOOPS = {
    "anthropic": [("messages.stream", "bench.naive_app", {"NAIVE_STREAM": "1"})],
    "openai": [("create(stream=True)", "bench.naive_openai_app", {}),
               ("chat.completions.stream", "bench.naive_openai_app", {"NAIVE_HELPER": "1"})],
}


def latency(provider: str, n: int = N) -> tuple[float, dict[str, float]]:
    """Baton's p50 in ms on `provider`'s edge, and each of its naive loops' p50 by label."""
    with Stack(f"edge-{provider}", handler=one_tool_round, provider=provider, BATON_TOOLS="bench.tools:TOOLS") as stack:
        queues: dict[str, str] = {}
        apps: list[Celery] = []
        for k, (label, app, extra) in enumerate(NAIVE_LOOPS[provider]):
            # NAIVE_STREAM as each loop says (the OpenAI app reads its own flag)
            naive_app, queues[label], _ = naive_beside(stack, 2, name=f"naive{k}", NAIVE_APP=app,
                                                       **{"NAIVE_STREAM": "", **extra})
            apps.append(naive_app)
        naive = apps[0]
        stack.worker("w1", concurrency=2)
        client = stack.client()
        stamp = uuid.uuid4().hex[:6]

        def baton_turn(chat: str) -> float:
            return timed_baton_turn(client, chat, PROMPT)

        def naive_turn(chat: str, queue: str) -> float:
            return timed_naive_turn(naive, queue, chat, PROMPT)

        baton_lat: list[float] = []
        naive_lat: dict[str, list[float]] = {label: [] for label in queues}
        for i in range(WARMUP + n):  # the sides alternate, so machine noise hits them alike
            took = baton_turn(f"b-{stamp}-{i}")
            if i >= WARMUP:
                baton_lat.append(took)
            for k, (label, queue) in enumerate(queues.items()):
                took = naive_turn(f"n{k}-{stamp}-{i}", queue)
                if i >= WARMUP:
                    naive_lat[label].append(took)
        for each in apps:
            each.close()
    return median(baton_lat) * 1000, {label: median(v) * 1000 for label, v in naive_lat.items()}


def _row(by_name: dict[str, Row], prefix: str) -> Row:
    return next(row for name, row in by_name.items() if name.startswith(prefix))


def main() -> list[Row]:
    rows: dict[str, list[Row]] = {"latency": [], "faults": [], "live": []}
    for provider in PROVIDERS:
        print(f"  -- {provider}", flush=True)
        baton, naives = latency(provider)
        for k, (label, naive) in enumerate(naives.items()):
            ratio = baton / naive
            print(f"  {provider}: turn latency p50 Baton {fmt(baton)} ms, streaming naive loop ({label}) {fmt(naive)} "
                  f"ms -> {fmt(ratio)}x", flush=True)
            goal, verdict = (f"≤ {LATENCY_GOAL:g}", judge(ratio, at_most=LATENCY_GOAL)) if k == 0 else ("—", "info")
            rows["latency"].append(Row(f"{provider}: turn latency ÷ streaming naive loop ({label}), 1 tool round (p50)",
                                       ratio, "x", goal, f"{verdict} ({fmt(baton)} vs {fmt(naive)} ms)"))
        found = {row.name: row for row in faults.main(provider_name=provider)}
        for prefix in ("provider requests ÷ logical calls", "max attempts", "usage.attempts"):
            row = _row(found, prefix)
            rows["faults"].append(Row(f"{provider}: {row.name}", row.value, row.unit, row.goal, row.verdict))
        found = {row.name: row for row in live_text.main(provider=provider)}
        for prefix in ("provider SSE event → browser-facing SSE delta, p50", "provider SSE event → browser-facing SSE "
                       "delta, p99"):
            row = _row(found, prefix)
            name = row.name.replace("provider SSE event", "provider chunk")
            rows["live"].append(Row(f"{provider}: {name}", row.value, row.unit, row.goal, row.verdict))
    return [*rows["latency"], *rows["faults"], *rows["live"]]


if __name__ == "__main__":
    print_rows(main())
