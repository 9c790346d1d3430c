"""What the command sandbox costs per `run_command`: bwrap vs BATON_SANDBOX=none, side by side in one run.

The real tool, in this process (no worker: the sandbox's cost is the tool's, and a worker would only add the
same constant to both sides). Commands alternate between the two modes so drift in the machine's load hits
both equally. Figures are medians (p50) of many calls; nothing is asserted.

    python -m bench.sandbox
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from agent.tools import Tool, execute
from agent.tools.sandbox import SandboxPolicy
from agent.tools.workspace import workspace_tools
from bench._common import Row, judge, median, print_rows

ROUNDS = 60
COMMANDS = {"true": "true", "ls": "ls -la", "a 100 ms command": "sleep 0.1"}
SLOW_ROUNDS = 15  # the 100 ms command: fewer rounds, its spread is the sleep's


def _tool(root: Path, sandbox: SandboxPolicy | None) -> Tool:
    return next(t for t in workspace_tools(root, sandbox=sandbox) if t.name == "run_command")


def _ms(tool: Tool, command: str) -> float:
    started = time.perf_counter()
    outcome = execute(tool, {"command": command})
    elapsed = (time.perf_counter() - started) * 1000
    if outcome.is_error or not outcome.content.startswith("exit code 0"):
        raise RuntimeError(f"{command!r} failed: {outcome.content[:300]}")
    return elapsed


def main() -> list[Row]:
    root = Path(tempfile.mkdtemp(prefix="baton-bench-sandbox-"))
    try:
        for i in range(20):
            (root / f"file-{i}.txt").write_text("x" * i)
        sandboxed, unconfined = _tool(root, SandboxPolicy()), _tool(root, None)
        for tool in (sandboxed, unconfined):  # warm the page cache for both
            _ms(tool, "true")
        rows: list[Row] = []
        for label, command in COMMANDS.items():
            rounds = SLOW_ROUNDS if "100 ms" in label else ROUNDS
            on, off = [], []
            for _ in range(rounds):
                on.append(_ms(sandboxed, command))
                off.append(_ms(unconfined, command))
            p50_on, p50_off = median(on), median(off)
            rows += [
                Row(f"run_command `{command}`, sandboxed (p50 of {rounds})", p50_on, "ms", "—", "info"),
                Row(f"run_command `{command}`, BATON_SANDBOX=none (p50 of {rounds})", p50_off, "ms", "—", "info"),
                Row(f"sandbox cost per call, `{command}` (p50 difference)", p50_on - p50_off, "ms", "—", "info"),
                Row(f"sandboxed ÷ unconfined, `{command}`", p50_on / p50_off, "x", "—", "info"),
            ]
        # Against a model step: a streamed provider answer takes seconds; 1 s is a generous lower bound.
        share = (rows[2].value or 0.0) / 1000
        rows.append(Row("sandbox cost per call ÷ a 1 s model step", share, "x", "≤ 0.05", judge(share, at_most=0.05)))
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    print_rows(main())
