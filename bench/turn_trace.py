"""Who sends each Redis command of a chat turn: MONITOR during turns of one tool round, every command classified.

The same turn as `bench.naive_loop` (the real `anthropic` SDK against the fake Messages API, one `peek` round,
then a streamed answer), through a real worker. MONITOR sees every command with its client's address, and
`ss -tnp` names the process behind each address (this one, the worker's main process, or a pool child), so a
command is put down to its sender: the client's `send_message` and `wait`, Celery and kombu themselves, the
result backend, task events, or the execution's reads, fenced writes, live text, watcher and hand-off.

Two counts per sender: *commands* as `INFO commandstats` counts them (MULTI, EXEC and the commands a Lua script
runs included), and *round trips* (a MULTI…EXEC block, a pipeline, or one EVALSHA with all it runs is one).
The worker's idle traffic (broker polls, heartbeats, the recovery sweep) is measured over a quiet window first
and taken out pro rata. MONITOR slows the server down: the timings here are not the benchmark's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass

import redis

from bench._common import Row, Stack, fmt, judge, print_rows
from bench.naive_loop import PROMPT, naive_beside, one_tool_round

TURNS = 10
IDLE_SECONDS = 3.0
PIPELINED_US = 40  # commands of one client this close together (after a script's last) were sent as one pipeline
_LINE = re.compile(r'^(?P<ts>[\d.]+) \[\d+ (?P<addr>[^\]]+)\] (?P<cmd>.*)$')


@dataclass
class Command:
    ts: float
    addr: str
    text: str
    inner: list[str]  # what a Lua script ran, as MONITOR showed it
    end: float = 0.0  # when the last command it ran was logged (a script's run is not the client's wait)


@dataclass
class Trip:
    """One round trip: a command, a MULTI…EXEC block or a pipeline, with what its scripts ran."""

    addr: str
    commands: list[Command]

    @property
    def text(self) -> str:
        return " ".join(c.text for c in self.commands)

    @property
    def inner(self) -> list[str]:
        return [i for c in self.commands for i in c.inner]

    @property
    def counted(self) -> int:
        return len(self.commands) + len(self.inner)


def _process_of_ports() -> dict[str, int]:
    """Local address -> pid, for this machine's TCP sockets (only our own processes are shown, which suffices)."""
    out = subprocess.run(["ss", "-tnpH"], capture_output=True, text=True, check=True).stdout
    found: dict[str, int] = {}
    for line in out.splitlines():
        parts, pid = line.split(), re.search(r"pid=(\d+)", line)
        if len(parts) >= 4 and pid:
            found[parts[3]] = int(pid.group(1))
    return found


def classify(role: str, trip: Trip) -> str:
    """The sender of one round trip (a pool child's fenced writes told apart by what they carry)."""
    t, inner = trip.text, " ".join(trip.inner)
    first = trip.commands[0].text
    if role == "client":
        if "SUBSCRIBE" in first:
            return "send_task: result subscription (SUBSCRIBE, UNSUBSCRIBE)"
        if first.startswith('"LPUSH"'):
            return "send_task: publish (LPUSH)"
        if first.startswith('"EVALSHA"') and "LPUSH" in " ".join(trip.inner):
            return "send_message: record, queue, event, task message, task-sent event while heard (one script)"
        if "task.sent" in t:
            return "send_task: task-sent event"
        if first.startswith(('"XREVRANGE"', '"XREAD"', '"HGETALL"')):
            return "wait: events and record"
        if ":turns" in first and first.startswith('"LINDEX"'):
            return "send_message: last turn read"
        return "send_message: record, queue, event (MULTI)"
    if role == "main":
        if "worker.heartbeat" in t or "_kombu.binding" in t or first.startswith(('"SCRIPT"', '"ZRANGEBYSCORE"')):
            return "idle"
        if "unacked_index" in t:
            return "kombu: ack (acks_late)" if '"ZREM"' in t else "kombu: message reserved (unacked)"
        if first.startswith('"BRPOP"'):
            return "kombu: BRPOP (re-armed per message)"
        if "celeryev/task" in t:
            return "task events (received, started, succeeded)"
        return "other"
    if "celery-task-meta" in t:
        if first.startswith('"GET"'):
            return "result backend: read before a write (Celery's SUCCESS guard)"
        return "result backend: " + ("STARTED" if "STARTED" in t else "SUCCESS" if "SUCCESS" in t else "other")
    if first.startswith('"EVALSHA"') and '"NX"' in inner and "HGETALL" in inner:
        return "execution: take (record, queue head, lease, flags, transcript)"
    if ":{budgets}:" in t or ":{rate:" in t:
        return "preflight: budget reservation and rate gate (one pipeline)"
    if first.startswith('"EVALSHA"') and trip.inner:
        if "LREM" in inner:
            return "fenced: settle"
        if "turn.started" in inner:
            return "fenced: start (record running, turn.started, user message)"
        if ":journal:" in inner:
            return "fenced: journal step" + (" (+ live text)" if "text.delta" in inner else "")
        if "text.delta" in inner:
            return "live text: a flush of its own"
        if "PEXPIRE" in inner and ":lease" in t:
            return "watcher: lease renewal"
        return "fenced: other"
    if '"NX"' in t and ":lease" in t:
        return "execution: lease taken + stop, drain, transcript, journal read"
    if ":stop" in t:
        return "watcher: stop and drain flags"
    if first.startswith('"HGETALL"') and ":rec:" in first:
        return "execution: record + queue head read"
    if first.startswith('"LINDEX"') and ":queue" in first:
        return "hand-off: next turn read (queue head)"
    if first.startswith(('"ZRANGEBYSCORE"', '"ZADD" "baton:active"')):
        return "idle"
    return "other"


def group(commands: list[Command]) -> list[Trip]:
    """Round trips: a MULTI…EXEC block, or commands of one connection sent within PIPELINED_US of each other.

    A command pipelined behind a blocking read is held by Redis until the read returns: MONITOR logs it then, right
    after the write that woke the read (whichever connection made it), and it is the read's round trip."""
    open_trip: dict[str, Trip] = {}
    in_multi: set[str] = set()
    out: list[Trip] = []
    last_logged = 0.0
    for c in commands:
        current = open_trip.get(c.addr)
        behind_block = (
            current is not None and '"BLOCK"' in current.commands[-1].text
            and (c.ts - last_logged) * 1e6 <= 4 * PIPELINED_US  # MONITOR logs the woken read's reply first
        )
        same = current is not None and (
            c.addr in in_multi or behind_block
            or (c.ts - max(current.commands[-1].ts, current.commands[-1].end)) * 1e6 <= PIPELINED_US
        )
        last_logged = max(c.ts, c.end)
        if same and current is not None:
            current.commands.append(c)
        else:
            open_trip[c.addr] = Trip(c.addr, [c])
            out.append(open_trip[c.addr])
        if c.text.startswith('"MULTI"'):
            in_multi.add(c.addr)
        elif c.text.startswith('"EXEC"'):
            in_multi.discard(c.addr)
    return out


def tally(commands: list[Command], roles: dict[str, str]) -> tuple[Counter[str], Counter[str], Counter[str]]:
    """Per sender: commands as INFO commandstats counts them (a script's own ones too), round trips, and commands
    as sent (a script one, a pipeline's each: what a count on the client's side sees)."""
    counted: Counter[str] = Counter()
    round_trips: Counter[str] = Counter()
    sent: Counter[str] = Counter()
    for trip in group(commands):
        role = roles.get(trip.addr, "other")
        sender = f"{role}|{classify(role, trip)}"
        counted[sender] += trip.counted
        round_trips[sender] += 1
        sent[sender] += len(trip.commands)
    return counted, round_trips, sent


def main(turns: int = TURNS) -> list[Row]:
    with Stack("trace", handler=one_tool_round, BATON_TOOLS="bench.tools:TOOLS") as stack:
        worker = stack.worker("w1", concurrency=2)
        client = stack.client()
        naive, naive_queue, naive_worker = naive_beside(stack, 2)
        for i in range(4):  # pool children warm: connections, SDK client, scripts loaded
            client.wait(client.send_message(f"warm-{i}", PROMPT), timeout=30)
            naive.send_task("naive.turn", args=[f"warm-n-{i}", PROMPT], queue=naive_queue).get(timeout=30)
        monitor = redis.Redis.from_url(stack.url).connection_pool.make_connection()
        monitor.connect()
        monitor.send_command("MONITOR")
        monitor.read_response()
        lines: list[str] = []
        done = threading.Event()

        def read() -> None:
            while not done.is_set():
                try:
                    reply = monitor.read_response()
                except (redis.RedisError, OSError):
                    return
                lines.append(reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        marker = redis.Redis.from_url(stack.url)
        marker.echo("IDLE-START")
        time.sleep(IDLE_SECONDS)
        marker.echo("TURNS-START")
        started = time.monotonic()
        for i in range(turns):
            result = client.wait(client.send_message(f"trace-{i}", PROMPT), timeout=30)
            if result.status != "completed":
                raise RuntimeError(f"turn ended {result.status}: {result.failure}")
        time.sleep(0.5)  # the acknowledgement and the result write of the last turn
        busy = time.monotonic() - started
        marker.echo("NAIVE-START")
        started = time.monotonic()
        for i in range(turns):
            naive.send_task("naive.turn", args=[f"trace-n-{i}", PROMPT], queue=naive_queue).get(timeout=30)
        time.sleep(0.5)
        naive_busy = time.monotonic() - started
        marker.echo("TURNS-END")
        ports = _process_of_ports()
        mains = {w.proc.pid: w for w in (worker, naive_worker) if w.proc}
        children = {int(p): parent for parent in mains for p in subprocess.run(
            ["pgrep", "-P", str(parent)], capture_output=True, text=True).stdout.split()}
        done.set()
        marker.close()
        naive.close()

    roles: dict[str, str] = {}
    for addr, pid in ports.items():
        roles[addr] = ("client" if pid == os.getpid() else "main" if pid in mains else "child" if pid in children
                       else "other")
    idle: list[Command] = []
    busy_cmds: list[Command] = []
    naive_cmds: list[Command] = []
    into: list[Command] | None = None
    for line in lines:
        m = _LINE.match(line)
        if m is None:
            continue
        if m["addr"] == "lua":
            if into:
                into[-1].inner.append(m["cmd"])
                into[-1].end = float(m["ts"])
            continue
        if '"ECHO"' in m["cmd"]:
            into = (idle if "IDLE-START" in m["cmd"] else busy_cmds if "TURNS-START" in m["cmd"]
                    else naive_cmds if "NAIVE-START" in m["cmd"] else None)
            continue
        if into is not None:
            into.append(Command(float(m["ts"]), m["addr"], m["cmd"], []))
    idle_counted, idle_trips, idle_sent = tally(idle, roles)
    counted, round_trips, sent = tally(busy_cmds, roles)
    scale = busy / IDLE_SECONDS
    print(f"  {turns} turns of one tool round, per turn (idle traffic over {IDLE_SECONDS:g} s taken out pro rata):")
    print(f"  {'sender':<78} {'commands':>9} {'round trips':>12}")
    totals: Counter[str] = Counter()
    for sender in sorted(counted, key=lambda s: (s.split("|")[0], -counted[s])):
        role, name = sender.split("|")
        n = (counted[sender] - idle_counted.get(sender, 0) * scale) / turns
        rt = (round_trips[sender] - idle_trips.get(sender, 0) * scale) / turns
        if name == "idle" or abs(n) < 0.05:
            continue
        totals[f"{role} commands"] += n
        totals[f"{role} trips"] += rt
        totals[f"{role} sent"] += (sent[sender] - idle_sent.get(sender, 0) * scale) / turns
        print(f"  {role + ': ' + name:<78} {n:>9.2f} {rt:>12.2f}")
    for role in ("client", "main", "child"):
        print(f"  {role + ' total':<78} {totals[role + ' commands']:>9.2f} {totals[role + ' trips']:>12.2f}")
    worker_n = totals["main commands"] + totals["child commands"]
    worker_rt = totals["main trips"] + totals["child trips"]
    print(f"  {'worker total (main + pool child)':<78} {worker_n:>9.2f} {worker_rt:>12.2f}", flush=True)
    # The naive loop's turn, counted the same way; its worker's idle traffic is Celery's alone, like Baton's
    # main process's, so the same idle window is taken out (Baton's sweeps are in it: this flatters neither side).
    naive_counted, naive_trips, naive_sent = tally(naive_cmds, roles)
    naive_scale = naive_busy / IDLE_SECONDS
    naive_totals: Counter[str] = Counter()
    for sender in naive_counted:
        role, name = sender.split("|")
        if name == "idle":
            continue
        side = "client" if role == "client" else "worker"
        naive_totals[f"{side} commands"] += naive_counted[sender] / turns
        naive_totals[f"{side} trips"] += naive_trips[sender] / turns
        naive_totals[f"{side} sent"] += naive_sent[sender] / turns
    idle_main = sum(v for k, v in idle_counted.items() if k.startswith("main|") and not k.endswith("|idle"))
    idle_main_trips = sum(v for k, v in idle_trips.items() if k.startswith("main|") and not k.endswith("|idle"))
    idle_main_sent = sum(v for k, v in idle_sent.items() if k.startswith("main|") and not k.endswith("|idle"))
    naive_totals["worker commands"] -= idle_main * naive_scale / turns
    naive_totals["worker trips"] -= idle_main_trips * naive_scale / turns
    naive_totals["worker sent"] -= idle_main_sent * naive_scale / turns
    worker_sent = totals["main sent"] + totals["child sent"]
    print(f"  naive loop, per turn: worker {naive_totals['worker commands']:.2f} commands in "
          f"{naive_totals['worker trips']:.2f} round trips; client {naive_totals['client commands']:.2f} in "
          f"{naive_totals['client trips']:.2f}", flush=True)
    return [
        Row("Redis commands per turn, 1 tool round, worker (as INFO commandstats counts: Lua's inner ones too)",
            worker_n, "commands", "≤ 25", judge(worker_n, at_most=25)),
        Row("  the same for the naive loop's worker", naive_totals["worker commands"], "commands", "—", "info"),
        Row("  Baton ÷ naive, worker commands", worker_n / naive_totals["worker commands"], "x", "—", "info"),
        # The issue's own figure (38 when it was filed, while commandstats read 70) can only have been this count.
        Row("Redis commands per turn, worker, as sent (a script one, a pipeline's each: MONITOR less the scripts')",
            worker_sent, "commands", "≤ 25",
            f"{judge(worker_sent, at_most=25)} (naive {fmt(naive_totals['worker sent'])})"),
        Row("Redis round trips per turn, worker (an EVALSHA with all it runs is one)", worker_rt, "round trips", "—",
            f"info (naive {fmt(naive_totals['worker trips'])})"),
        Row("Redis commands per turn, client (send + wait)", totals["client commands"], "commands", "—",
            f"info (naive {fmt(naive_totals['client commands'])})"),
        Row("Redis round trips per turn, client", totals["client trips"], "round trips", "—",
            f"info (naive {fmt(naive_totals['client trips'])})"),
    ]


if __name__ == "__main__":
    print_rows(main(int(sys.argv[1]) if len(sys.argv) > 1 else TURNS))
