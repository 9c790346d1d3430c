"""`baton budget set SCOPE [--usd X] [--tokens N] [--period P]`, `baton budget show SCOPE`, `... clear SCOPE`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

Emit = Callable[[argparse.Namespace, dict[str, Any], str], None]


def add_parser(cmd: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """The `budget` command and its three actions (each takes --json, as every command does)."""
    p = cmd("budget", "set, show or clear a spend budget: user:ID, chat:ID, run:ID, agent:NAME or all")
    p.add_argument("action", choices=("set", "show", "clear"))
    p.add_argument("scope", help="user:ID, chat:ID, run:ID, agent:NAME or all")
    p.add_argument("--usd", type=float, help="set: US dollars a period (agents with a price)")
    p.add_argument("--tokens", type=int, help="set: tokens a period (input, output and cache tokens)")
    p.add_argument("--period", choices=("day", "month", "total"), default="month", help="set: calendar UTC, or total")


def run(client: Any, args: argparse.Namespace, emit: Emit) -> int:
    """Do the action; bad input and an unknown scope leave as the client's `ValidationError` / `NotFound`."""
    if args.action == "set":
        out = client.set_budget(args.scope, usd=args.usd, tokens=args.tokens, period=args.period)
    elif args.action == "show":
        out = client.budget(args.scope)
    else:
        out = client.clear_budget(args.scope)
        emit(args, out, f"{args.scope}: {'cleared' if out['cleared'] else 'had no budget'}")
        return 0
    emit(args, out, render(out))
    return 0


def render(budget: dict[str, Any]) -> str:
    """One budget for people: its limits, what is spent and held in this period, and when it resets."""
    parts = []
    if budget["usd"] is not None:
        parts.append(f"${budget['spent_usd']:.4f} of ${budget['usd']:.4f} spent (${budget['reserved_usd']:.4f} held)")
    if budget["tokens"] is not None:
        parts.append(f"{budget['spent_tokens']} of {budget['tokens']} tokens spent ({budget['reserved_tokens']} held)")
    resets = f"; resets {budget['resets_at']}" if budget["resets_at"] else ""
    return f"{budget['scope']} ({budget['period']}): {'; '.join(parts)}{resets}"
