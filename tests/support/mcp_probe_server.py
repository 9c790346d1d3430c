"""A stdio MCP server in the standard library alone, to run inside a coding run's sandbox.

The sandbox shows the system's programs (Debian's /usr/bin/python3, without the `mcp` SDK) and the workspace,
nothing of the test's virtualenv or checkout: so this speaks the few JSON-RPC methods a client needs
(initialize, tools/list, tools/call, ping) itself. A test copies it into the run's workspace.

Its one tool, `probe`, tries to reach what a sandboxed server must not: `env` (its variables' names), `cwd`,
`read PATH` (a file's head, e.g. /proc/PID/environ of the worker), `secrets` (every /proc/*/environ it can read
that holds `sk-ant`), `connect HOST:PORT` (a TCP connection, e.g. to the test's Redis).
"""

from __future__ import annotations

import glob
import json
import os
import socket
import sys

TOOL = {
    "name": "probe",
    "description": "Try to reach something from inside the server and say what was found.",
    "inputSchema": {"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]},
    "annotations": {"readOnlyHint": True},
}


def probe(what: str) -> str:
    if what == "env":
        return " ".join(sorted(os.environ))
    if what == "cwd":
        return os.getcwd()
    if what.startswith("read "):
        try:
            with open(what.split(" ", 1)[1], "rb") as fh:
                return "read: " + fh.read(4000).decode("utf-8", "replace")
        except OSError as err:
            return f"unreadable: {err}"
    if what == "secrets":
        found = []
        for path in glob.glob("/proc/[0-9]*/environ"):
            try:
                with open(path, "rb") as fh:
                    if b"sk-ant" in fh.read():
                        found.append(path)
            except OSError:
                pass
        return "found in " + " ".join(found) if found else "none found"
    if what.startswith("connect "):
        host, _, port = what.split(" ", 1)[1].rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return "reached"
        except OSError as err:
            return f"unreachable: {err}"
    return f"unknown probe {what!r}"


def answer(request: dict) -> dict | None:
    method, params = request.get("method"), request.get("params") or {}
    if "id" not in request:
        return None  # a notification (notifications/initialized, cancelled): nothing to answer
    if method == "initialize":
        result: dict = {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "probe", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call" and params.get("name") == "probe":
        text = probe(str((params.get("arguments") or {}).get("what", "")))
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


def main() -> None:
    # As the reference servers do: a banner on stderr, which the worker's log carries as `NAME: line`.
    print(f"probe server running on stdio in {os.getcwd()}", file=sys.stderr, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
