"""One execution of a chat turn or a coding run: load, decide, act.

The flow both drivers share: take the lease, replay the journal, run the loop, and settle the
unit (completed, failed, stopped, interrupted or auto-resumed) in one fenced write. Celery is not
imported here; the task modules turn the returned `Outcome` into Celery actions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import redis

from agent.agents.pinning import Choice
from agent.agents.resolved import Resolved
from agent.errors import AwaitingApproval, Cancelled, LeaseLost
from agent.loop.cancel import CancelToken
from agent.loop.edge import LoopConfig, LoopFailure
from agent.loop.failures import classify
from agent.loop.policy import Driver, policy_for
from agent.loop.run import run_loop
from agent.loop.state import LoopState
from agent.messages import (
    notice,
)
from agent.provider.rate_gate import LimitedProvider, RateLimited
from agent.provider.replay import RequestFailed
from agent.tools import Tool
from config.settings import Settings
from tasks.execution import wiring
from tasks.execution.holding import Holding, Loaded, stopping
from tasks.execution.live import RedisLiveText
from tasks.execution.rate_wait import RateWaiting
from tasks.execution.seeding import Seeding
from tasks.execution.settling import Outcome, Unit, next_turn
from tasks.execution.starting import Starting
from tasks.execution.watcher import Watcher
from tasks.runtime import logs
from tasks.store.ahead import Ask
from tasks.store.budget_rules import unit_scopes
from tasks.store.budgets import RedisSpend, applying
from tasks.store.failover import master_of, replid
from tasks.store.fenced import Fence, ReplicationUnconfirmed, fill
from tasks.store.files import StoredFiles
from tasks.store.journal import Flags, RedisJournal
from tasks.store.lease import Lease, new_token
from tasks.store.preflight import PREFLIGHT
from tasks.store.reads import keys, parse_transcript
from tasks.store.records import Failure, UnitRecord
from tasks.store.replicas import REPLICAS
from tasks.store.replies import text_or_none
from tasks.store.take import HISTORY_LEN, TEXT, Taken, take
from tasks.telemetry.executions import traced

log = logging.getLogger("baton.execution")

# A unit handed back by a draining worker comes back after this; meanwhile the draining worker's consumer has
# usually stopped, and returns the message to the queue if it holds it.
DRAINING_DEFER_SECONDS = 0.5
# A run's own stdio MCP servers are closed within this when its execution ends (a drain included): the SDK gives a
# server 2 s to exit once its stdin closes, then kills it (and bwrap's --die-with-parent takes its sandbox down).
RUN_MCP_CLOSE_SECONDS = 4.0


class Execution(Holding, Starting, Seeding, RateWaiting):
    def __init__(
        self, settings: Settings, unit: Unit, *, hostname: str, task_id: str, user: str | None = None
    ) -> None:
        """`user`: whose unit its message says it is ("": nobody's; None: the message does not say), for the take to
        ask what the first model call's preflight needs (tasks/store/ahead.py)."""
        self.settings = settings
        self.unit = unit
        self.hostname = hostname
        self.task_id = task_id
        self.user = user
        self.client = wiring.store(settings)
        self.cancel = CancelToken()
        self.live: RedisLiveText | None = None
        self.replication_id: str | None = None
        self.journal: RedisJournal | None = None
        self.watcher: Watcher | None = None
        self.run_servers: wiring.RunServers | None = None

    def run(self) -> Outcome:
        unit = self.unit
        kind, _, ident = unit.owner_id.partition(":")
        ids: dict[str, object] = {f"{kind}_id": ident, "task_id": self.task_id}
        if unit.driver is Driver.CHAT_TURN:
            ids["turn_id"] = unit.unit_id
        logs.context.set(ids)
        lease = Lease(
            self.client, keys.lease(unit.owner_id), new_token(unit.unit_id, self.hostname), self.settings.lease_ttl
        )
        # Behind Sentinel or on a cluster, where the store can fail over under this execution (else None).
        master = master_of(self.client, unit.record_key)
        rec, taken = self._take(lease, replication=master is not None)
        if master is not None and taken.replication is not None:
            self._note_replication(master, taken.replication)
        if rec is not None:
            # The attempt a log line belongs to: retries and resumes start a new generation.
            logs.context.set({**ids, "attempt": rec.generation + 1, "interruptions": rec.interruptions})
        if rec is None:
            log.error("no record for %s %s; message dropped", unit.owner_id, unit.unit_id)
            return Outcome("drop", "unknown unit")
        if rec.terminal:
            # The message of a turn that settled and then lost its hand-off (the store gone before the next turn
            # was read, the worker killed before it published it) comes back here, redelivered or retried: it
            # starts the next turn now. On RabbitMQ nothing else would: the lost-message sweep cannot see its
            # queues. A needless copy is turned away by the lease or the finished record.
            chat = unit.driver is Driver.CHAT_TURN
            return Outcome("done", "already finished", hand_off=next_turn(self.client, unit.owner_id) if chat else None)
        loaded = self._hold(rec, taken, lease)
        if isinstance(loaded, Outcome):
            return loaded
        if loaded.draining and not stopping(loaded, rec):
            # Picked up by a worker already shutting down (a threads pool's consumer keeps receiving for up to 2 s
            # after SIGTERM, and gets the very message a drained unit just requeued): hand it back untouched, to
            # another worker, rather than start it only to interrupt it again and count that against the unit.
            lease.release()
            return Outcome("defer", "this worker is draining", DRAINING_DEFER_SECONDS)
        self.fence = Fence(self.client, lease.key, lease.token)
        with traced(self.client, self.fence, unit, rec, taken.record) as span:  # `invoke_agent AGENT`, if tracing
            return span.ended(self._guarded(rec, loaded, lease), rec)

    def _note_replication(self, master: redis.Redis, info: dict[str, Any]) -> None:
        """The master's replication history as the take read it (before it wrote anything), checked by the settle's
        write, and the replicas a write tool's entry waits for, from the same reply."""
        self.replication_id = replid(info)
        REPLICAS.note(master, info)

    def _take(self, lease: Lease, *, replication: bool) -> tuple[UnitRecord | None, Taken]:
        """One round trip for the record, the chat's queue head, the lease, what the execution starts from, and
        (the common case, a unit's first start) the start itself, as the fleet's default agent and model: a unit
        that names another agent or model is started later, once its agent is resolved."""
        unit = self.unit
        default = wiring.agents(self.settings).get(None)
        assert default is not None  # a registry always has its default
        self.choice, self.model = Choice(default), default.model
        taken = take(
            self.client,
            lease,
            owner_id=unit.owner_id,
            unit_id=unit.unit_id,
            hostname=self.hostname,
            check_head=unit.driver is Driver.CHAT_TURN,
            start=self._first_start(fill(TEXT), fill(HISTORY_LEN), time.time()),
            starts_as=(default.name, default.model),
            replication=replication,
            ask=self._ask(default),
        )
        self.choice = None
        rec = UnitRecord.from_hash(taken.record)
        if rec is not None and taken.started:
            rec.history_len = len(taken.transcript or [])  # the script pushed the user's message: it ends them
            self._running(rec)
            self._adopt(rec, Choice(default))
        else:
            PREFLIGHT.forget()  # not started here: no first call of this unit follows (or not at once)
        return rec, taken

    def _ask(self, default: Resolved) -> Ask | None:
        """What the first model call's preflight needs, when the message says whose unit it is: asked with the take."""
        if self.user is None:
            return None
        gate = wiring.gate_ahead(self.settings, self.client, default)
        scopes = unit_scopes(self.unit.owner_id, self.user or None, default.name)
        return Ask(gate.ahead(default.model, default.max_tokens) if gate is not None else None,
                   applying(self.unit.owner_id, scopes), keys.budgets_mark(self.unit.owner_id))

    def _guarded(self, rec: UnitRecord, loaded: Loaded, lease: Lease) -> Outcome:
        """Execute under the lease with its watcher; whatever nobody foresaw fails the unit, classified."""
        unit, client = self.unit, self.client
        self.lease_token = lease.token  # the budgets' reservations are held under it (tasks/store/budgets.py)
        watcher = self.watcher = Watcher(
            client, lease, owner_id=unit.owner_id, unit_id=unit.unit_id, hostname=self.hostname, cancel=self.cancel
        )
        try:
            watcher.seen(stop=loaded.stop, draining=loaded.draining)  # what its first poll would have read
            watcher.start(poll=False)
            self.cancel.look_with(watcher.look_now)
            return self._execute(rec, loaded)
        except LeaseLost:
            log.warning("lease lost for %s; a newer execution owns it, stopping without writing", unit.owner_id)
            return Outcome("drop", "lease lost")
        except redis.RedisError:
            raise  # the store is unreachable: nothing can be settled; the lease sweep recovers the unit
        except Exception as err:
            log.exception("unexpected error in %s %s", unit.owner_id, unit.unit_id)
            failure_class = classify(err).failure_class  # `unknown` only for what nobody foresaw
            failure = Failure.model_validate(
                {
                    "class": str(failure_class),
                    "retryable": policy_for(unit.driver, failure_class).retryable,
                    "message": f"{type(err).__name__}: {err}",
                }
            )
            return self._settle(
                rec, LoopState(), "failed", failure, extra=[notice("error", f"Failed: {failure.message}")]
            )
        finally:
            PREFLIGHT.forget()  # what waited for a preflight this execution did not make
            self.fence.drop_ahead()  # a write sent ahead that no later write confirmed (the execution broke off)
            watcher.stop()
            if self.live is not None:
                self.live.close()
            if self.run_servers is not None:  # the run's own MCP servers stop with its execution, however it ended
                self.run_servers.close(RUN_MCP_CLOSE_SECONDS)

    # -- the steps -------------------------------------------------------------------------------

    def _execute(self, rec: UnitRecord, loaded: Loaded) -> Outcome:
        unit, settings = self.unit, self.settings
        history = parse_transcript(loaded.transcript)
        if self.choice is None:
            choice = self._choose(rec)
            if choice.agent is None:
                handed_back = None if stopping(loaded, rec) else self._hand_back(rec, started=rec.history_len >= 0)
                if handed_back is not None:
                    return handed_back
                self._start(rec, loaded.transcript, history)
                return self._settle_stopped(rec, LoopState()) if stopping(loaded, rec) else self._agent_unknown(rec)
            self._adopt(rec, choice)
        if not loaded.started:
            self._start(rec, loaded.transcript, history)
        journal = self._journal(rec, loaded)
        if stopping(loaded, rec):  # read with the lease (the watcher has cancelled already, for the stop key)
            if not journal.steps:
                return self._settle_stopped(rec, LoopState())
            # Stopped with journaled rounds (parked for approval, or waiting after a drain): replay them, so the
            # transcript keeps what ran, and stop at the first step that is not journaled.
            self.cancel.cancel("stop")
        # A new generation (a retry, an auto-resume) starts an empty journal; the run's step count goes on.
        journal.done_steps = max(journal.done_steps, rec.steps)
        self.live = RedisLiveText(
            self.client,
            self.fence,
            owner_id=unit.owner_id,
            unit_id=unit.unit_id,
            generation=rec.generation,
            loaded=loaded.live,
        )
        state = self._seed(rec, journal)
        config = self._config(rec)
        agent = self.choice.agent if self.choice is not None else None
        tools = self._tools(rec, agent)
        provider = wiring.build_provider(settings, self.client, agent)
        if isinstance(provider, LimitedProvider) and journal.flags is not None and self.watcher is not None:
            # Every model call has a preflight: a read tool's result rides the next one's (`Flags.later`).
            journal.flags.later = self.watcher.read_with_next_call
        # What a later call's preflight asks goes at the end of the round before it (with the results it carries).
        journal.asks = self._asks(rec, config, agent, gated=isinstance(provider, LimitedProvider))
        try:
            run_loop(
                history,
                state,
                provider=provider,
                tools=tools,
                edge=journal,
                cancel=self.cancel,
                config=config,
                live=self.live,
                files=StoredFiles(self.client, unit.owner_id),
                # behind the fleet's rate gate, each reservation goes in its admission's round trip
                spend=RedisSpend(self.client, unit.owner_id, unit_scopes(unit.owner_id, rec.user, rec.agent),
                                 self.lease_token, deferred=isinstance(provider, LimitedProvider)),
            )
        except Cancelled as stop:
            if stop.reason == "stop" or self._stop_asked():
                return self._settle_stopped(rec, state)
            return self._interrupted(rec, state, "platform_deploy")
        except (RequestFailed, LoopFailure) as err:
            return self._failed(rec, state, err)
        except AwaitingApproval as waiting:
            return self._park(rec, state, waiting.pending)
        except ReplicationUnconfirmed as unconfirmed:
            return self._unconfirmed(rec, state, unconfirmed)
        except RateLimited as wait:
            return self._rate_limited(rec, state, config, wait)
        return self._settle(rec, state, "completed", None)

    def _stop_asked(self) -> bool:
        """Whether a stop names the unit now, though a drain cancelled it first: the stop settles it here, as the
        user asked, instead of a requeue whose next execution would only stop it (with a deploy notice before the
        stop's, and a worker's take spent on it). A poll between a SIGTERM's drain flag and an interrupt's stop key
        reads the drain alone, so which came first is a race the user cannot see and should not pay for."""
        return keys.stop_names(text_or_none(self.client.get(keys.stop(self.unit.owner_id))), self.unit.unit_id)

    def _asks(self, rec: UnitRecord, config: LoopConfig, agent: Resolved | None, *, gated: bool
              ) -> Callable[[], Ask] | None:
        """What a later model call's preflight asks (tasks/store/ahead.py), for the round before it to send at its end:
        whether a budget of the unit exists, and the gate's admission (`gated`: the calls have one). None where the
        admission needs the request (rate limits of the agent's own): its round trip carries the rest, as before."""
        resolved = agent or wiring.agents(self.settings).get(None)
        gate = wiring.gate_ahead(self.settings, self.client, resolved) if resolved is not None else None
        if gated and gate is None:
            return None
        owner = self.unit.owner_id
        budget_keys = applying(owner, unit_scopes(owner, rec.user, rec.agent))  # as the unit's reservations read them
        mark = keys.budgets_mark(owner)
        return lambda: Ask(gate.ahead(config.model, config.max_tokens) if gate is not None else None, budget_keys, mark)

    def _journal(self, rec: UnitRecord, loaded: Loaded) -> RedisJournal:
        """The unit's journal as its lease read it; the loop's look after a tool round rides the round's last result
        (the stop flag and this worker's drain flag are read by its write: on a cluster both are on the unit's slot,
        as the take's reads of them are)."""
        unit = self.unit
        journal = self.journal = RedisJournal(
            self.client,
            self.fence,
            owner_id=unit.owner_id,
            unit_id=unit.unit_id,
            generation=rec.generation,
            loaded=loaded.journal,
            min_replicas=self.settings.redis_min_replicas,
        )
        if self.watcher is not None:
            journal.flags = Flags(keys.stop(unit.owner_id), self.watcher.drain_key, self.watcher.seen_with_results)
        return journal

    def _tools(self, rec: UnitRecord, agent: Resolved | None) -> Mapping[str, Tool]:
        """A turn's tools, or a run's (its MCP servers started in its workspace, stopped when it ends)."""
        if self.unit.driver is Driver.CHAT_TURN:
            return wiring.chat_tools(self.settings, agent)
        self.run_servers = wiring.run_servers(self.settings, rec.workspace or ".", agent)
        return wiring.run_tools(self.settings, rec.workspace or ".", self.run_servers, agent)
