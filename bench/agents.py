"""What agents cost a turn: resolving a unit's agent in the worker (in-process, per unit), and Redis commands and
latency per turn through a real worker (scripted provider, no tools) for a fleet without agents, a turn naming
the default agent, and a turn naming another one.

Run: `python -m bench.agents`. The commands per turn are the store's `INFO commandstats` delta over the turns,
worker idle traffic (broker polls, sweeps, the agents' publication) included, so the arms compare as a whole.
"""

from __future__ import annotations

import statistics
import time

from agent.agents.pinning import choose, chosen_model
from bench._common import Row, Stack, command_counts, delta, judge, print_rows
from config.settings import Settings
from tasks.execution import wiring

FLEET = "tests.support.agents_fleet:AGENTS"
TURNS = 40


def resolve_cost(iterations: int = 2000, rounds: int = 15) -> tuple[float, float]:
    """Microseconds per unit to resolve its agent as an execution does: its own version (the common case), and a
    unit pinned to another version (its tool list rebuilt from the recorded definition)."""
    settings = Settings(agents=FLEET, provider="anthropic", tools="tests.support.counting_tools:TOOLS")
    registry = wiring.agents(settings)
    mine = registry.get("support")
    assert mine is not None
    other = type(mine)(**{**mine.__dict__, "instructions": "an older version", "version": ""})

    def one(version: str) -> None:
        agent = registry.get("support")
        choice = choose(version, agent, lambda _v: other)
        assert choice.agent is not None
        chosen_model(choice.agent, None)
        wiring.chat_tools(settings, choice.agent)

    out = []
    for version in (mine.version, other.version):
        samples = []
        for _ in range(rounds):
            started = time.perf_counter()
            for _ in range(iterations):
                one(version)
            samples.append((time.perf_counter() - started) / iterations * 1e6)
        out.append(statistics.median(samples))
    return out[0], out[1]


def per_turn(name: str, agent: str | None, **env: str) -> tuple[float, float]:
    """(Redis commands per turn, median turn latency in ms) over `TURNS` turns of distinct chats."""
    with Stack(f"agents-{name}", **env) as stack:
        stack.worker()
        client = stack.client()
        if agent is not None:
            deadline = time.monotonic() + 20
            while agent not in {a["name"] for a in client.agents()["agents"]}:
                assert time.monotonic() < deadline, "the worker did not publish its agents"
                time.sleep(0.05)
        client.wait(client.send_message("warm", "hello", agent=agent), timeout=30)
        store = stack.redis()
        before = command_counts(store)
        latencies = []
        for i in range(TURNS):
            started = time.perf_counter()
            result = client.wait(client.send_message(f"c{i}", "hello, no tools please", agent=agent), timeout=30)
            latencies.append((time.perf_counter() - started) * 1000)
            assert result.status == "completed", result
        spent = sum(delta(command_counts(store), before).values())
        return spent / TURNS, statistics.median(latencies)


def main() -> list[Row]:
    own, pinned = resolve_cost()
    plain = per_turn("none", None)
    named_default = per_turn("default", "support", BATON_AGENTS=FLEET)
    named_other = per_turn("other", "triage", BATON_AGENTS=FLEET)
    rows = [
        Row("resolve a unit's agent (its own version)", own, "µs", "< 500", judge(own, at_most=500)),
        Row("resolve a unit's agent (pinned to another version)", pinned, "µs", "< 500", judge(pinned, at_most=500)),
        Row("commands per turn, no BATON_AGENTS", plain[0], "cmds", "", "info"),
        Row("commands per turn, the default agent named", named_default[0], "cmds", f"≤ {plain[0] + 1:.1f}",
            judge(named_default[0], at_most=plain[0] + 1)),
        Row("commands per turn, another agent named", named_other[0], "cmds", f"≤ {plain[0] + 1:.1f}",
            judge(named_other[0], at_most=plain[0] + 1)),
        Row("median turn, no BATON_AGENTS", plain[1], "ms", "", "info"),
        Row("median turn, the default agent named", named_default[1], "ms", "", "info"),
        Row("median turn, another agent named", named_other[1], "ms", "", "info"),
    ]
    print_rows(rows)
    return rows


if __name__ == "__main__":
    main()
