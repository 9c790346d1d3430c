"""What prompt caching saves on a long coding run, against the fake Messages API's cache semantics.

The same scripted run (each step reads a ~3,000-character file or writes one) is run twice on a private
stack, with `BATON_PROMPT_CACHE=on` and `off`; in the cached run one step's stream drops after
`message_start`, so that step is replayed. The fake API bills each request as the real one would
(tests/support/fake_prompt_cache.py: prefixes cached per `cache_control` mark, no minimum size, no TTL).

Cost is the billed-input equivalent, in input-token prices: input + 1.25 x cache writes + 0.1 x cache reads
(the 5-minute cache's prices). Figures: the run's cost with caching over without (the issue's goal: at most
0.3 on a 40-step run), the smallest cache-read share of a step's prompt after the first two (goal: at least
0.9; bounded by 1 - what the last round added / the prompt, so early steps with large results cannot reach it),
the share of the previous step's whole prompt that each step reads from the cache (1 means no miss), and the
replayed attempt's cost over what that same request costs uncached ("replays cost a tenth").
"""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path
from typing import Any

from bench._common import Row, Stack, judge, print_rows
from tests.support.fake_anthropic import Fault, Reply, Script, failing, text, tool_call

STEPS = (20, 40)
DROP_AT = 10  # the model step whose first attempt is dropped (cached run only)
FILE_CHARS = 3000


def cost(billed: dict[str, Any]) -> float:
    """Billed-input equivalent of one request, in input-token prices."""
    return (
        billed["input_tokens"]
        + 1.25 * billed["cache_creation_input_tokens"]
        + 0.1 * billed["cache_read_input_tokens"]
    )


def _prompt(billed: dict[str, Any]) -> int:
    return billed["input_tokens"] + billed["cache_creation_input_tokens"] + billed["cache_read_input_tokens"]


def script(steps: int, *, drop: bool) -> list[Reply]:
    """`steps` model steps: reads and writes alternating, then the summary; optionally one dropped stream."""
    replies: list[Reply] = []
    for i in range(steps - 1):
        if i % 2 == 0:
            replies.append(tool_call("read_file", {"path": f"src/m{i}.py"}, id=f"toolu_r{i}"))
        else:
            body = f"# step {i}\n" + "x = 1\n" * 80
            replies.append(tool_call("write_file", {"path": f"out/s{i}.py", "content": body}, id=f"toolu_w{i}"))
        if drop and i == DROP_AT - 1:
            replies.append(failing(Fault("drop", after_events=3), like=text("cut short")))
    replies.append(text("All steps done."))
    return replies


def _workspace(root: Path, steps: int) -> Path:
    ws = root / "ws"
    (ws / "src").mkdir(parents=True)
    for i in range(steps):
        (ws / "src" / f"m{i}.py").write_text(f"# module {i}\n" + ("def f(): return 42  # padding\n" * 100)[:FILE_CHARS])
    return ws


def measure(steps: int, *, cached: bool) -> list[dict[str, Any]]:
    """Run one coding run; the billing of every request the fake API delivered, in order."""
    with Stack(f"cache-{steps}-{'on' if cached else 'off'}", handler=Script(script(steps, drop=cached))) as stack:
        assert stack.fake is not None
        stack.fake.prompt_cache = True  # the API's billing either way; only Baton's marks differ
        env = {"BATON_PROMPT_CACHE": "on" if cached else "off"}
        stack.worker(concurrency=1, **env)
        client = stack.client(**env)
        ref = client.start_run(f"a {steps}-step coding run", workspace=_workspace(stack.tmp, steps))
        status = client.wait(ref, timeout=300)
        if status.status != "completed":
            raise RuntimeError(f"the {steps}-step run ended {status.status}: {status.failure}")
        return list(stack.fake.billing)


def main() -> list[Row]:
    rows: list[Row] = []
    for steps in STEPS:
        on, off = measure(steps, cached=True), measure(steps, cached=False)
        # Only completed attempts are compared step by step; the dropped one is costed apart.
        dropped = next(i for i, b in enumerate(on) if b["faulted"])
        replay, first = on[dropped + 1], on[dropped]
        ratio = sum(cost(b) for b in on) / sum(cost(b) for b in off)
        steps_on = [b for b in on if not b["faulted"]]
        shares = [b["cache_read_input_tokens"] / _prompt(b) for b in steps_on[2:]]
        # What the cache could have given: the part of each step's prompt that the step before already sent.
        hits = [b["cache_read_input_tokens"] / _prompt(a) for a, b in itertools.pairwise(steps_on)]
        replay_ratio = cost(replay) / _prompt(replay)
        print(f"  {steps} steps: cost with caching {sum(cost(b) for b in on):.0f}, without "
              f"{sum(cost(b) for b in off):.0f} (input-token equivalents); dropped attempt {cost(first):.0f}, "
              f"its replay {cost(replay):.0f} of {_prompt(replay)} prompt tokens", flush=True)
        rows += [
            Row(f"{steps}-step run: billed input with caching ÷ without (dropped attempt included)", ratio, "x",
                "≤ 0.3", judge(ratio, at_most=0.3)),
            Row(f"{steps}-step run: smallest cache-read share of a step's prompt after the first two", min(shares),
                "", "≥ 0.9", judge(min(shares), at_least=0.9)),
            Row(f"{steps}-step run: median cache-read share of a step's prompt after the first two",
                statistics.median(shares), "", "≥ 0.9", judge(statistics.median(shares), at_least=0.9)),
            Row(f"{steps}-step run: smallest share of the previous step's prompt read from the cache", min(hits), "",
                "1", judge(min(hits), at_least=1.0)),
            Row(f"{steps}-step run: replayed attempt's cost ÷ the same request uncached", replay_ratio, "x",
                "≈ 0.1", judge(replay_ratio, at_most=0.11)),
        ]
    return rows


if __name__ == "__main__":
    print_rows(main())
