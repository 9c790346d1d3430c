"""`baton`: the command line. Every command takes --json and then prints exactly one JSON object.

Exit status: 0 success (enqueued, or completed with --wait), 1 failed/stopped/timeout or the store or broker
unreachable (the message says which, and where), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from config.settings import SettingsError
from tasks.cli.budget import add_parser as budget_parser

Command = Callable[[str, str], argparse.ArgumentParser]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # bad usage is bad input: exit 2 with a clear line
        self.print_usage(sys.stderr)
        sys.stderr.write(f"baton: error: {message}\n")
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="baton", description="LLM chat turns and coding runs on Celery and Redis.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def cmd(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--json", action="store_true", help="print one JSON object")
        return p

    _unit_commands(cmd)
    _decision_commands(cmd)
    _kept_commands(cmd)
    budget_parser(cmd)
    _process_commands(sub, cmd)
    return parser


def _unit_commands(cmd: Command) -> None:
    """Starting units and reading them: send, retry, run, status, stop, transcript, events."""
    p = cmd("send", "send a message to a chat")
    p.add_argument("chat_id")
    p.add_argument("text")
    p.add_argument(
        "--on-busy",
        choices=["enqueue", "interrupt", "reject"],
        default="enqueue",
        help="when the chat has a turn queued or running: run after it (default), interrupt it, or refuse (exit 1)",
    )
    p.add_argument("--agent", help="the agent that answers (from this turn on; default: the chat's)")
    p.add_argument("--model", help="one of the agent's models (default: its own)")
    p.add_argument("--wait", action="store_true")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--user", help="whose message it is (a chat belongs to its first message's user)")
    p.add_argument(
        "--file", action="append", default=[], metavar="PATH",
        help="attach an image (PNG, JPEG, GIF, WebP) or a PDF; repeat for more",
    )
    p = cmd("retry", "re-run a chat's failed last turn, or a failed run")
    p.add_argument("id")
    p.add_argument("--wait", action="store_true")
    p.add_argument("--timeout", type=float, default=120.0)
    p = cmd("run", "start a coding run in a workspace")
    p.add_argument("goal")
    p.add_argument("--workspace", required=True)
    p.add_argument("--run-id")
    p.add_argument("--agent", help="the agent that runs it (default: the fleet's default)")
    p.add_argument("--model", help="one of the agent's models (default: its own)")
    p.add_argument("--wait", action="store_true")
    p.add_argument("--timeout", type=float, default=3600.0)
    p.add_argument("--user", help="whose run it is")
    cmd("status", "a run's status").add_argument("run_id")
    cmd("stop", "stop a chat's running turn or a run").add_argument("id")
    cmd("transcript", "a chat's or run's transcript").add_argument("id")
    p = cmd("events", "a chat's or run's events, one per line")
    p.add_argument("id")
    p.add_argument("--follow", action="store_true")
    p.add_argument("--after")


def _decision_commands(cmd: Command) -> None:
    """approve and deny a call that waits for a person."""
    for name, what in (("approve", "approve"), ("deny", "deny")):
        p = cmd(name, f"{what} a tool call that waits for approval")
        p.add_argument("id")
        p.add_argument("tool_use_id")
        if name == "deny":
            p.add_argument("--reason")
        p.add_argument("--by", help="who decides (shown in the timeline; default: the OS user)")


def _kept_commands(cmd: Command) -> None:
    """What the store keeps: chats, runs, delete, agents."""
    for kind in ("chats", "runs"):
        p = cmd(kind, f"list {kind}, newest activity first (one page; --before NEXT for the next)")
        p.add_argument("--user", help="only this user's")
        p.add_argument("--limit", type=int, default=50)
        p.add_argument("--before", help="the next of the previous page")
    p = cmd("delete", "delete a chat or run: every key of it (refused while busy, unless --stop)")
    p.add_argument("id")
    p.add_argument("--stop", action="store_true", help="stop it first, and delete it once it has settled")
    cmd("agents", "list the agents the workers serve: version, provider, model, models, tools, queue, workers")


def _process_commands(sub: Any, cmd: Command) -> None:
    """Commands that run something here rather than ask the store: tools, worker, demo, serve."""
    p = cmd(
        "tools", "list every tool a worker would offer: effect, idempotent, approval, source (python or an MCP server)"
    )
    p.add_argument(
        "--debug", action="store_true",
        help="also show Baton's log on stderr: the MCP servers' starts and what each writes to its stderr",
    )
    # Listed for `baton --help` only: `main` hands everything after `worker` to Celery before argparse sees it.
    sub.add_parser(
        "worker", add_help=False,
        help="start a worker: celery -A tasks worker -l info, then any Celery worker option (-c, -P, -Q, -l, ...)",
    )
    p = cmd("demo", "run the embedded stack and tour what Baton does (the chat page shows it live)")
    p.add_argument("--keep", action="store_true", help="leave the stack and the page up until Ctrl-C")
    p.add_argument(
        "--provider",
        choices=("scripted", "openai"),
        default="scripted",
        help="openai: serve the script over the Chat Completions API locally and run the openai provider on it",
    )
    p = cmd("serve", "the HTTP API and the chat page (uvicorn)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["worker"]:
        # Not through argparse: it cannot pass unknown options on (`-c 2` was "unrecognized arguments"), and
        # every Celery worker option, `--help` included, is Celery's to read.
        from tasks.cli.worker import exec_worker

        exec_worker(given[1:])
    args = _parser().parse_args(given)
    if args.command == "demo":
        from tasks.demo.scenarios import main as demo_main

        return demo_main(json_output=args.json, keep=args.keep, provider=args.provider)
    if args.command == "tools":
        from tasks.cli.tools import main as tools_main

        return tools_main(args.json, debug=args.debug)
    if args.command == "serve":
        from tasks.cli.serve import serve

        return serve(args.host, args.port)
    from tasks.client import Busy, Client, NotFound, Unavailable, ValidationError

    try:
        client = Client()
    except SettingsError as err:
        print(f"baton: {err}", file=sys.stderr)
        return 2
    try:
        return _dispatch(client, args)
    except (ValidationError, NotFound) as err:
        if args.json:
            print(json.dumps({"error": str(err)}))
        print(f"baton: {err}", file=sys.stderr)
        return 2
    except Busy as err:
        if args.json:
            print(json.dumps({"error": "busy", "turn_id": err.turn_id}))
        print(f"baton: {err}", file=sys.stderr)
        return 1
    except Unavailable as err:
        if args.json:
            print(json.dumps({"error": str(err), "unavailable": err.part}))
        print(f"baton: {err}", file=sys.stderr)
        return 1
    finally:
        client.close()


def _emit(args: argparse.Namespace, payload: dict[str, Any], human: str) -> None:
    print(json.dumps(payload, ensure_ascii=False) if args.json else human)


def _dispatch(client: Any, args: argparse.Namespace) -> int:
    from tasks.cli.commands import HANDLERS

    return HANDLERS[args.command](client, args, _emit)
