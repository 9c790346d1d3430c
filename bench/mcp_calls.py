"""The cost of an MCP tool call (stdio, the SDK's server) against the same tool as a `@tool` function, and how long
three stdio servers take to start and list their tools. Needs a Redis (the test server counts its calls there).

    python bench/mcp_calls.py redis://127.0.0.1:6379/15 [calls]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.tools import execute, tool  # noqa: E402
from agent.tools.mcp.config import parse_servers  # noqa: E402
from agent.tools.mcp.connections import Servers  # noqa: E402


@tool(effect="read")
def lookup(key_name: str) -> str:
    """The same work as the MCP server's lookup, minus its Redis count."""
    return f"value-of-{key_name}"


def main(redis_url: str, n: int = 300) -> None:
    def spec(name: str) -> dict:
        env = {"MCP_TEST_REDIS": redis_url, "MCP_TEST_NAME": name, "PYTHONPATH": str(REPO)}
        return {"command": sys.executable, "args": ["-m", "tests.support.mcp_server"], "env": env}

    specs = parse_servers(json.dumps({"mcpServers": {f"s{i}": spec(f"s{i}") for i in range(3)}}))
    started = time.perf_counter()
    servers = Servers(specs, call_timeout=30)
    listed = servers.listing()
    start_s = time.perf_counter() - started
    assert len(listed) == 3, servers.status()
    mcp, local = [], []
    for i in range(n):
        t0 = time.perf_counter()
        servers.call("s0", "probe", {"what": "cwd"}, f"k{i}")  # no Redis inside: the call's own cost
        mcp.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        execute(lookup, {"key_name": "k"})
        local.append(time.perf_counter() - t0)
    servers.close()
    print(json.dumps({
        "start_3_stdio_servers_s": round(start_s, 3),
        "mcp_call_p50_ms": round(statistics.median(mcp) * 1000, 3),
        "tool_call_p50_ms": round(statistics.median(local) * 1000, 4),
        "calls": n,
    }))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:3]))
