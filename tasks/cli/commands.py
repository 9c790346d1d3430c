"""What each client command of `baton` does once its arguments are parsed: one small function a command, looked up
in `HANDLERS` by name. Each prints through `emit` (a JSON object with --json, a line for people otherwise) and
returns the exit status; bad input and busy units leave as the client's exceptions, which `main` turns into
statuses."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from collections.abc import Callable
from typing import Any

from tasks.cli import views
from tasks.cli.budget import run as budget_command

Emit = Callable[[argparse.Namespace, dict[str, Any], str], None]
Handler = Callable[[Any, argparse.Namespace, Emit], int]


def send_or_retry(client: Any, args: argparse.Namespace, emit: Emit) -> int:
    ref = _send(client, args) if args.command == "send" else client.retry(args.id)
    if hasattr(ref, "run_id"):
        status = client.wait(ref, timeout=args.timeout) if args.wait else client.run_status(ref.run_id)
        emit(args, status.model_dump(), f"run {status.run_id}: {status.status}")
        return views.run_exit(status, args.wait)
    if args.wait and not args.json and sys.stdout.isatty():
        views.live_progress(client, ref, args.timeout)
    result = client.wait(ref, timeout=args.timeout) if args.wait else client.turn(ref.chat_id, ref.turn_id)
    emit(args, result.model_dump(), views.render_turn(result))
    return views.turn_exit(result, args.wait)


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


def start_run(client: Any, args: argparse.Namespace, emit: Emit) -> int:
    ref = client.start_run(
        args.goal, args.workspace, run_id=args.run_id, agent=args.agent, model=args.model, user=args.user
    )
    status = client.wait(ref, timeout=args.timeout) if args.wait else client.run_status(ref.run_id)
    reply = f"\n{status.reply}" if status.reply else ""
    emit(args, status.model_dump(), f"run {status.run_id}: {status.status}{reply}")
    return views.run_exit(status, args.wait)


def listing(client: Any, args: argparse.Namespace, emit: Emit) -> int:
    page = getattr(client, args.command)(user=args.user, limit=args.limit, before=args.before)
    emit(args, page.public(), views.render_page(page))
    return 0


def delete(client: Any, args: argparse.Namespace, emit: Emit) -> int:
    out = client.delete(args.id, stop=args.stop)
    emit(args, out, views.render_deleted(out))
    return 0


def agents(client: Any, args: argparse.Namespace, emit: Emit) -> int:
    listed = client.agents()
    emit(args, listed, views.render_agents(listed))
    return 0


def status(client: Any, args: argparse.Namespace, emit: Emit) -> int:
    got = client.run_status(args.run_id)
    counts = f"{got.steps} steps, {got.interruptions} interruptions"
    emit(args, got.model_dump(), f"run {got.run_id}: {got.status} ({counts})")
    return 0


def stop(client: Any, args: argparse.Namespace, emit: Emit) -> int:
    out = client.stop(args.id)
    emit(args, {"id": out["id"], "stopped": out["stopped"]}, out["message"])
    return 0


def transcript(client: Any, args: argparse.Namespace, emit: Emit) -> int:
    messages = client.transcript(args.id)
    payload = {"id": args.id, "messages": [m.model_dump(mode="json") for m in messages]}
    emit(args, payload, "\n".join(views.render_message(m) for m in messages))
    return 0


def decide(client: Any, args: argparse.Namespace, emit: Emit) -> int:
    """`approve` / `deny`: `by` is --by, else the OS user (the audit trail's name)."""
    by = (args.by if args.by is not None else os_user()) or None
    if args.command == "approve":
        out = client.approve(args.id, args.tool_use_id, by=by)
    else:
        out = client.deny(args.id, args.tool_use_id, reason=args.reason, by=by)
    again = " (it was already decided)" if out.get("already_decided") else ""
    decided = {"id": out["id"], "tool_use_id": out["tool_use_id"], "decision": out["decision"]}
    emit(args, decided, f"{out['tool_use_id']}: {out['decision']}{again}")
    return 0


def os_user() -> str | None:
    """Who runs this command, as the OS names them: the audit trail's `by` when `--by` is not given. None
    (the trail then reads "someone") where no name can be found: a container's uid without a passwd entry
    and no LOGNAME/USER, say; an approval never fails for want of a name."""
    try:
        return getpass.getuser() or None
    except (OSError, KeyError, ImportError):  # 3.13+: OSError; before: pwd's KeyError; no pwd module at all
        return None


def events(client: Any, args: argparse.Namespace, emit: Emit) -> int:
    """One event a line, as they come with --follow (until interrupted)."""
    after = args.after
    while True:
        found = client.follow(args.id, after) if args.follow else client.events(args.id, after)
        for event in found:
            print(event.model_dump_json() if args.json else _event_line(event), flush=True)
            after = event.id
        if not args.follow:
            return 0


def _event_line(event: Any) -> str:
    data = event.model_dump(exclude={"id", "at", "type", "chat_id", "run_id"}, exclude_none=True)
    return f"{event.id}  {event.type:<16} {json.dumps(data, ensure_ascii=False)}"


HANDLERS: dict[str, Handler] = {
    "send": send_or_retry, "retry": send_or_retry, "run": start_run, "chats": listing, "runs": listing,
    "delete": delete, "budget": budget_command, "agents": agents, "status": status, "stop": stop,
    "transcript": transcript, "approve": decide, "deny": decide, "events": events,
}
