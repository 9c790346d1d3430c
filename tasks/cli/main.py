"""`baton`: the command line. Every command takes --json and then prints exactly one JSON object.

Exit status: 0 success (enqueued, or completed with --wait), 1 failed/stopped/timeout or the store or broker
unreachable (the message says which, and where), 2 bad input.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Sequence
from typing import Any

from config.settings import SettingsError


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

    _send_arguments(cmd("send", "send a message to a chat"))
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
    p = cmd("status", "a run's status")
    p.add_argument("run_id")
    p = cmd("stop", "stop a chat's running turn or a run")
    p.add_argument("id")
    p = cmd("transcript", "a chat's or run's transcript")
    p.add_argument("id")
    p = cmd("events", "a chat's or run's events, one per line")
    p.add_argument("id")
    p.add_argument("--follow", action="store_true")
    p.add_argument("--after")
    p = cmd("approve", "approve a tool call that waits for approval")
    p.add_argument("id")
    p.add_argument("tool_use_id")
    p.add_argument("--by", help="who decides (shown in the timeline; default: the OS user)")
    p = cmd("deny", "deny a tool call that waits for approval")
    p.add_argument("id")
    p.add_argument("tool_use_id")
    p.add_argument("--reason")
    p.add_argument("--by", help="who decides (shown in the timeline; default: the OS user)")
    for kind in ("chats", "runs"):
        p = cmd(kind, f"list {kind}, newest activity first (one page; --before NEXT for the next)")
        p.add_argument("--user", help="only this user's")
        p.add_argument("--limit", type=int, default=50)
        p.add_argument("--before", help="the next of the previous page")
    p = cmd("delete", "delete a chat or run: every key of it (refused while busy, unless --stop)")
    p.add_argument("id")
    p.add_argument("--stop", action="store_true", help="stop it first, and delete it once it has settled")
    cmd("agents", "list the agents the workers serve: version, provider, model, models, tools, queue, workers")
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
    return parser


def _send_arguments(p: argparse.ArgumentParser) -> None:
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


def _send(client: Any, args: argparse.Namespace) -> Any:
    """`baton send`: the message, with the files read from `--file` (one that cannot be read is bad input)."""
    from tasks.client import Attachment, ValidationError

    files = []
    for path in args.file:
        try:
            files.append(Attachment.from_path(path))
        except OSError as err:
            raise ValidationError(f"cannot read {path}: {err.strerror or err}") from None
    return client.send_message(
        args.chat_id, args.text, on_busy=args.on_busy, agent=args.agent, model=args.model, user=args.user,
        files=files,
    )


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


def os_user() -> str | None:
    """Who runs this command, as the OS names them: the audit trail's `by` when `--by` is not given. None
    (the trail then reads "someone") where no name can be found: a container's uid without a passwd entry
    and no LOGNAME/USER, say; an approval never fails for want of a name."""
    try:
        return getpass.getuser() or None
    except (OSError, KeyError, ImportError):  # 3.13+: OSError; before: pwd's KeyError; no pwd module at all
        return None


def _emit(args: argparse.Namespace, payload: dict[str, Any], human: str) -> None:
    print(json.dumps(payload, ensure_ascii=False) if args.json else human)


def _dispatch(client: Any, args: argparse.Namespace) -> int:
    from tasks.cli.views import (
        render_agents,
        render_deleted,
        render_message,
        render_page,
        render_turn,
        run_exit,
        turn_exit,
    )

    if args.command in ("send", "retry"):
        ref = _send(client, args) if args.command == "send" else client.retry(args.id)
        if hasattr(ref, "run_id"):
            status = client.wait(ref, timeout=args.timeout) if args.wait else client.run_status(ref.run_id)
            _emit(args, status.model_dump(), f"run {status.run_id}: {status.status}")
            return run_exit(status, args.wait)
        if args.wait and not args.json and sys.stdout.isatty():
            from tasks.cli.views import live_progress

            live_progress(client, ref, args.timeout)
        result = client.wait(ref, timeout=args.timeout) if args.wait else client.turn(ref.chat_id, ref.turn_id)
        _emit(args, result.model_dump(), render_turn(result))
        return turn_exit(result, args.wait)
    if args.command == "run":
        ref = client.start_run(
            args.goal, args.workspace, run_id=args.run_id, agent=args.agent, model=args.model, user=args.user
        )
        status = client.wait(ref, timeout=args.timeout) if args.wait else client.run_status(ref.run_id)
        _emit(
            args,
            status.model_dump(),
            f"run {status.run_id}: {status.status}" + (f"\n{status.reply}" if status.reply else ""),
        )
        return run_exit(status, args.wait)
    if args.command in ("chats", "runs"):
        page = getattr(client, args.command)(user=args.user, limit=args.limit, before=args.before)
        _emit(args, page.public(), render_page(page))
        return 0
    if args.command == "delete":
        out = client.delete(args.id, stop=args.stop)
        _emit(args, out, render_deleted(out))
        return 0
    if args.command == "agents":
        listed = client.agents()
        _emit(args, listed, render_agents(listed))
        return 0
    if args.command == "status":
        status = client.run_status(args.run_id)
        _emit(
            args,
            status.model_dump(),
            f"run {status.run_id}: {status.status} ({status.steps} steps, {status.interruptions} interruptions)",
        )
        return 0
    if args.command == "stop":
        out = client.stop(args.id)
        _emit(args, {"id": out["id"], "stopped": out["stopped"]}, out["message"])
        return 0
    if args.command == "transcript":
        messages = client.transcript(args.id)
        payload = {"id": args.id, "messages": [m.model_dump(mode="json") for m in messages]}
        _emit(args, payload, "\n".join(render_message(m) for m in messages))
        return 0
    if args.command in ("approve", "deny"):
        by = (args.by if args.by is not None else os_user()) or None
        if args.command == "approve":
            out = client.approve(args.id, args.tool_use_id, by=by)
        else:
            out = client.deny(args.id, args.tool_use_id, reason=args.reason, by=by)
        again = " (it was already decided)" if out.get("already_decided") else ""
        _emit(
            args,
            {"id": out["id"], "tool_use_id": out["tool_use_id"], "decision": out["decision"]},
            f"{out['tool_use_id']}: {out['decision']}{again}",
        )
        return 0
    if args.command == "events":
        after = args.after
        while True:
            events = client.follow(args.id, after) if args.follow else client.events(args.id, after)
            for event in events:
                print(event.model_dump_json() if args.json else _event_line(event), flush=True)
                after = event.id
            if not args.follow:
                return 0
    raise AssertionError(args.command)


def _event_line(event: Any) -> str:
    data = event.model_dump(exclude={"id", "at", "type", "chat_id", "run_id"}, exclude_none=True)
    return f"{event.id}  {event.type:<16} {json.dumps(data, ensure_ascii=False)}"

