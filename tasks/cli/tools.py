"""`baton tools`: every tool a worker with these settings would offer, with its effect and where it comes from.

An operator checks here what each MCP server's annotations made of its tools (a read, a write, idempotent,
waiting for approval) before trusting them with a ledger. The MCP servers are started as a worker would start
them, listed, and stopped again; one that cannot start is reported with its reason (exit status 1).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from agent.errors import McpConfigError, ToolDefinitionError, ToolLoadError
from config.settings import Settings, SettingsError, load_settings

NO_TOOLS = (
    "no tools: a chat turn gets none, a coding run only the workspace tools; add Python tools with "
    "BATON_TOOLS=module:attribute, MCP servers' with BATON_MCP_SERVERS=path/to/mcp.json"
)

NO_TOOLS_FROM_SERVERS = "no tools: no MCP server of BATON_MCP_SERVERS listed any, and BATON_TOOLS adds none"


def tools_report(settings: Settings) -> dict[str, Any]:
    """`{"tools": [...], "servers": {NAME: {"transport", "status", "error"}}}` for these settings."""
    from tasks.execution import wiring

    python_tools = list(wiring.chat_tools(wiring.without_mcp(settings)).values())
    servers = wiring.mcp_servers(settings)
    try:
        mcp_tools = wiring.mcp_tools(settings)
        status = servers.status() if servers is not None else {}
        specs = servers.specs if servers is not None else {}
    finally:
        wiring.close_mcp(6.0)
    tools = [
        {
            "name": t.name,
            "effect": t.effect,
            "idempotent": t.idempotent,
            "approval": t.approval,
            "source": t.source,
            "description": t.description,
        }
        for t in [*python_tools, *mcp_tools]
    ]
    report = {
        name: {"transport": spec.transport, "status": "up" if status.get(name) is None else "unavailable",
               "error": status.get(name)}
        for name, spec in specs.items()
    }
    return {"tools": tools, "servers": report}


def main(json_output: bool, *, debug: bool = False) -> int:
    if debug:
        show_log()
    try:
        settings = load_settings()
        report = tools_report(settings)
    except SettingsError as err:
        return _fail(json_output, str(err))
    except McpConfigError as err:
        return _fail(json_output, f"invalid settings: BATON_MCP_SERVERS: {err}")
    except (ToolLoadError, ToolDefinitionError) as err:
        return _fail(json_output, f"invalid settings: BATON_TOOLS: {err}")
    if json_output:
        print(json.dumps(report, ensure_ascii=False))
    else:
        if not report["tools"]:  # said, not an empty screen that reads like a listing that failed
            print(NO_TOOLS_FROM_SERVERS if report["servers"] else NO_TOOLS)
        for t in report["tools"]:
            flags = [t["effect"]] + [flag for flag in ("idempotent", "approval") if t[flag]]
            print(f"{t['name']:<40} {' '.join(flags):<28} {t['source']}")
        for name, server in report["servers"].items():
            if server["error"]:
                # Why a server failed is often only in what it wrote to stderr, which is logged, not printed.
                pointer = server["transport"] == "stdio" and not debug
                hint = " (what it wrote to stderr: baton tools --debug)" if pointer else ""
                print(f"mcp server {name}: unavailable: {server['error']}{hint}", file=sys.stderr)
    return 1 if any(s["error"] for s in report["servers"].values()) else 0


def show_log() -> None:
    """Baton's own log records on stderr, the servers' stderr lines (INFO, `baton.mcp`) among them. Without it
    only warnings reach stderr (Python's last-resort handler), so nothing a server writes comes between the lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    baton = logging.getLogger("baton")
    baton.addHandler(handler)
    baton.setLevel(logging.DEBUG)


def _fail(json_output: bool, message: str) -> int:
    if json_output:
        print(json.dumps({"error": message}))
    print(f"baton: {message}", file=sys.stderr)
    return 2
