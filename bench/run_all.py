"""Run every benchmark, print one Markdown table and write it to bench/RESULTS.md, above the sections written there.

    python -m bench.run_all            # all of them
    python -m bench.run_all drain      # only the named ones

Each benchmark module has `main() -> list[Row]`; one that fails is reported in the table and the
rest still run.
"""

from __future__ import annotations

import datetime
import importlib
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

from bench._common import Row, fmt
from tasks.demo.embedded_redis import find_redis_server

SCRIPTS = [
    "naive_loop",
    "turn_latency",
    "redis_roundtrips",
    "turn_trace",
    "profile_turn",  # prints nothing without py-spy (not a dependency)
    "turn_phases",
    "fenced_script",
    "throughput",
    "drain",
    "faults",
    "memory",
    "sandbox",
    "web_streams",
    "live_text",
    "usechat_stream",
    "files_history",
    "growth",
    "prompt_cache",
    "rate_limits",
    "concurrency",
    "providers",
    "cluster",
]
RESULTS = Path(__file__).with_name("RESULTS.md")


def with_notes(report: str, existing: str) -> str:
    """The new table in place of the old one, and the written sections after it (each a `## ` heading: analyses
    of single benchmarks, and where a turn's time goes) kept: a full run used to write over them."""
    at = existing.find("\n## ")
    return report if at < 0 else report.rstrip("\n") + "\n" + existing[at:]


def redis_version() -> str:
    binary = find_redis_server()
    if binary is None:
        return "no redis-server"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    found = re.search(r"v=(\S+)", out)
    return found.group(1) if found else out.strip()


def header() -> str:
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"Machine: {platform.platform()}, {os.cpu_count()} CPUs (load average at start {load}), "
        f"Python {platform.python_version()}, Redis {redis_version()}. "
        f"Date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}."
    )


def table(sections: list[tuple[str, float, list[Row]]]) -> str:
    lines = ["| metric | measured | goal | verdict |", "| --- | --- | --- | --- |"]
    for name, seconds, rows in sections:
        lines.append(f"| **{name}** ({seconds:.0f} s) | | | |")
        for row in rows:
            measured = f"{fmt(row.value)} {row.unit}".strip()
            lines.append(f"| {row.name.strip()} | {measured} | {row.goal} | {row.verdict} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    names = (argv if argv is not None else sys.argv[1:]) or SCRIPTS
    unknown = [n for n in names if n not in SCRIPTS]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; choose from {SCRIPTS}", file=sys.stderr)
        return 2
    head = header()
    print(head, flush=True)
    sections: list[tuple[str, float, list[Row]]] = []
    suite_started = time.perf_counter()
    for name in names:
        print(f"\n== {name}", flush=True)
        started = time.perf_counter()
        try:
            rows = importlib.import_module(f"bench.{name}").main()
        except Exception as err:
            traceback.print_exc()
            rows = [Row(f"{name} did not finish: {type(err).__name__}: {err}"[:200], None, "", "—", "error")]
        sections.append((name, time.perf_counter() - started, rows))
        print(f"   ({sections[-1][1]:.1f} s)", flush=True)
    total = time.perf_counter() - suite_started
    report = f"# Baton benchmarks\n\n{head}\n\n{table(sections)}\n\nWhole suite: {total:.0f} s.\n"
    print("\n" + report, flush=True)
    existing = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    RESULTS.write_text(with_notes(report, existing), encoding="utf-8")
    print(f"written to {RESULTS}", flush=True)
    return 0 if all(r.verdict != "error" for _, _, rows in sections for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
