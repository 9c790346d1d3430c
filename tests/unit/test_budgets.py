"""Prices, costs and budgets: the pure rules, the loop's reservations around every attempt, and the scripts."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import fakeredis
import pytest

from agent import Agent, Price
from agent.agents.resolved import Resolved, resolve
from agent.loop.cancel import CancelToken
from agent.loop.memory_edge import MemoryEdge
from agent.loop.spend import BudgetExceeded, Charge, worst_case
from agent.loop.state import LoopState, Usage
from agent.provider.base import TokenUsage
from agent.provider.price import cost_nanos, cost_usd
from agent.provider.scripted import ScriptedProvider, ScriptedReply, reply_fault, reply_text
from tasks.store import budget_rules, budgets, keys
from tests.unit.test_loop import CONFIG, HISTORY, Kit

PRICE = Price(input=3.0, output=15.0, cache_write=3.75, cache_read=0.30)
NOW = datetime(2026, 12, 31, 23, 59, tzinfo=UTC)


# -- prices and costs ------------------------------------------------------------------------------


def test_cost_prices_each_figure_at_its_own_price():
    """Input, output, cache writes and cache reads each at their price per million tokens, in exact nano-dollars."""
    usage = TokenUsage(
        input_tokens=1000, output_tokens=200, cache_creation_input_tokens=400, cache_read_input_tokens=5000
    )
    assert cost_nanos(usage, PRICE) == 1000 * 3000 + 200 * 15000 + 400 * 3750 + 5000 * 300
    assert cost_usd(usage, PRICE) == pytest.approx(0.003 + 0.003 + 0.0015 + 0.0015)
    assert cost_usd(TokenUsage(), PRICE) == 0.0


def test_cache_prices_default_to_the_input_price():
    price = Price(input=2.0, output=8.0)
    assert cost_nanos(TokenUsage(cache_creation_input_tokens=10, cache_read_input_tokens=10), price) == 20 * 2000


def test_the_worst_case_is_every_input_token_at_the_dearest_input_price_plus_max_tokens():
    """An estimate of 100 tokens bounds the request at 400 (a text token is at least a byte); the provider's own count
    raises it when it counted more than that; output at `max_tokens`."""
    worst = worst_case(100, 1.0, 50, PRICE)
    assert worst == Charge(400 + 50, 400 * 3750 + 50 * 15000)
    assert worst_case(100, 6.0, 50, None) == Charge(600 + 50, 0)


def test_an_agent_carries_its_price_into_what_units_record_but_not_into_its_version():
    """The price is how the fleet bills a unit, not what it runs: a new price moves no unit to a new version."""
    priced = resolve(Agent(name="a", price=PRICE), provider="scripted", model="m")
    plain = resolve(Agent(name="a"), provider="scripted", model="m")
    assert priced.version == plain.version
    assert Resolved.from_dict(priced.as_dict()).price == PRICE
    with pytest.raises(ValueError):
        Price(input=-1, output=1)


def test_usage_shows_cost_only_with_a_price():
    usage = Usage()
    usage.add(TokenUsage(input_tokens=10), attempts=1, discarded=0)
    assert "cost_usd" not in usage.model_dump()
    usage.add(TokenUsage(input_tokens=10), attempts=1, discarded=0, cost_nanos=30_000)
    usage.add(TokenUsage(input_tokens=10), attempts=1, discarded=0, cost_nanos=1)
    assert usage.model_dump()["cost_usd"] == 0.000030001


# -- the rules ---------------------------------------------------------------------------------------


def test_windows_and_resets_follow_the_utc_calendar():
    assert budget_rules.window("day", NOW) == "2026-12-31"
    assert budget_rules.window("month", NOW) == "2026-12"
    assert budget_rules.window("total", NOW) == "total"
    assert budget_rules.resets_at("day", NOW) == "2027-01-01T00:00:00Z"
    assert budget_rules.resets_at("month", NOW) == "2027-01-01T00:00:00Z"
    assert budget_rules.resets_at("month", datetime(2026, 2, 3, tzinfo=UTC)) == "2026-03-01T00:00:00Z"
    assert budget_rules.resets_at("total", NOW) is None


@pytest.mark.parametrize("scope", ["all", "user:alice", "chat:c-1", "run:r.2", "agent:support_bot"])
def test_scopes_accepted(scope):
    assert budget_rules.check_scope(scope) == scope


@pytest.mark.parametrize("scope", ["", "everyone", "user:", "team:x", "chat:a b", "all:x", None])
def test_scopes_refused(scope):
    with pytest.raises(budget_rules.BudgetError):
        budget_rules.check_scope(scope)


def test_limits_are_checked():
    assert budget_rules.check_limits(1.5, None, "day") == (1_500_000_000, None)
    for usd, tokens, period in [(None, None, "month"), (-1, None, "month"), (1, 1.5, "month"), (1, None, "week")]:
        with pytest.raises(budget_rules.BudgetError):
            budget_rules.check_limits(usd, tokens, period)


def test_a_unit_is_held_by_its_users_its_owners_its_agents_and_the_fleets_budget():
    assert budget_rules.unit_scopes("chat:c1", "alice", "support") == ["user:alice", "chat:c1", "agent:support", "all"]
    assert budget_rules.unit_scopes("run:r1", None, None) == ["run:r1", "all"]


# -- the scripts (fakeredis with Lua) --------------------------------------------------------------


@pytest.fixture
def store():
    return fakeredis.FakeRedis()


def test_every_budget_key_is_on_one_slot():
    """One reservation script touches a unit's every budget and its owner's held reservations: one slot on a
    cluster, however the unit's own keys are sharded."""
    from redis.crc import key_slot

    keys.use_cluster(True)
    try:
        names = [keys.budget(s) for s in ("all", "user:u", "chat:c", "run:r", "agent:a")]
        names += [keys.budget_held("chat:c"), keys.budget_held("run:r")]
        assert len({key_slot(n.encode()) for n in names}) == 1
    finally:
        keys.use_cluster(False)


def test_the_answer_has_the_contracts_fields(store):
    out = budgets.set_budget(store, "user:alice", 1.0, 5000, "month")
    assert set(out) == {"scope", "usd", "tokens", "period", "spent_usd", "spent_tokens", "reserved_usd",
                        "reserved_tokens", "resets_at"}
    assert out["usd"] == 1.0 and out["tokens"] == 5000 and out["spent_usd"] == 0.0 and out["reserved_tokens"] == 0
    assert budgets.read_budget(store, "user:bob") is None
    assert budgets.clear_budget(store, "user:alice") and budgets.read_budget(store, "user:alice") is None


def test_a_reservation_holds_every_budget_and_settles_once(store):
    """Held on each budget of the unit; settled to what the attempt cost; a second settlement changes nothing."""
    budgets.set_budget(store, "user:alice", None, 1000, "month")
    budgets.set_budget(store, "all", 10.0, None, "total")
    spend = budgets.RedisSpend(store, "chat:c1", ["user:alice", "chat:c1", "all"], "lease-1")
    rid = spend.reserve(Charge(600, 5_000_000))
    assert budgets.read_budget(store, "user:alice")["reserved_tokens"] == 600
    assert budgets.read_budget(store, "all")["reserved_usd"] == 0.005
    spend.settle(rid, Charge(120, 1_000_000))
    spend.settle(rid, Charge(120, 1_000_000))
    alice = budgets.read_budget(store, "user:alice")
    assert (alice["spent_tokens"], alice["reserved_tokens"]) == (120, 0)
    assert budgets.read_budget(store, "all")["spent_usd"] == 0.001
    assert budgets.held(store, "chat:c1") == {}


def test_a_reservation_past_a_limit_is_refused_naming_the_scope(store):
    budgets.set_budget(store, "user:alice", None, 1000, "month")
    spend = budgets.RedisSpend(store, "chat:c1", ["user:alice", "chat:c1", "all"], "lease-1")
    held = spend.reserve(Charge(600, 0))
    with pytest.raises(BudgetExceeded) as refused:
        spend.reserve(Charge(600, 0))  # 600 held + 600 > 1000: what is held counts, not only what is spent
    assert refused.value.scope == "user:alice"
    assert str(refused.value).startswith("budget_exceeded: the budget of user:alice")
    spend.settle(held, Charge(100, 0))
    spend.reserve(Charge(600, 0))  # 100 spent + 600 <= 1000


def test_a_dollar_budget_does_not_hold_an_agent_without_a_price(store):
    budgets.set_budget(store, "all", 0.0, None, "month")
    spend = budgets.RedisSpend(store, "chat:c1", ["chat:c1", "all"], "lease-1")
    spend.reserve(Charge(10_000, 0))
    with pytest.raises(BudgetExceeded):
        spend.reserve(Charge(1, 1))


def test_no_budget_holds_nothing(store):
    spend = budgets.RedisSpend(store, "chat:c1", ["chat:c1", "all"], "lease-1")
    assert spend.reserve(Charge(10, 10)) == budgets.NOTHING_HELD
    assert store.keys(f"{keys.PREFIX}:*") == []


def test_a_lost_executions_reservations_are_settled_at_the_worst_case(store):
    """By the next execution's first reservation, or by the sweep: the lost attempt may have been billed."""
    budgets.set_budget(store, "chat:c1", None, 10_000, "total")
    lost = budgets.RedisSpend(store, "chat:c1", ["chat:c1", "all"], "lease-1")
    lost.reserve(Charge(700, 0))
    nxt = budgets.RedisSpend(store, "chat:c1", ["chat:c1", "all"], "lease-2")  # the next execution's lease
    rid = nxt.reserve(Charge(50, 0))
    assert budgets.read_budget(store, "chat:c1")["spent_tokens"] == 700
    assert budgets.release_lost(store, "chat:c1") == 1  # the sweep: this one too, at its worst case
    assert budgets.read_budget(store, "chat:c1")["spent_tokens"] == 750
    nxt.settle(rid, Charge(10, 0))  # too late: settled already
    assert budgets.read_budget(store, "chat:c1")["spent_tokens"] == 750


def test_the_sweep_settles_what_an_execution_without_the_lease_holds(store):
    """An entry held under the unit's current lease stays; one held under another (a killed pool child's) is settled
    at its worst case by the next execution's reservation, one whose unit holds no lease by the sweep, once; the
    holders' set forgets an owner that holds nothing."""
    budgets.set_budget(store, "all", None, 10_000, "total")
    budgets.RedisSpend(store, "chat:live", ["all"], "lease-dead").reserve(Charge(300, 0))
    budgets.RedisSpend(store, "chat:gone", ["all"], "lease-gone").reserve(Charge(500, 0))
    store.set(keys.lease("chat:live"), "lease-live")
    live = budgets.RedisSpend(store, "chat:live", ["all"], "lease-live")
    kept = live.reserve(Charge(100, 0))
    assert budgets.read_budget(store, "all")["spent_tokens"] == 300
    assert budgets.release_orphans(store) == 1 and budgets.release_orphans(store) == 0
    out = budgets.read_budget(store, "all")
    assert (out["spent_tokens"], out["reserved_tokens"]) == (800, 100)
    live.settle(kept, Charge(40, 0))
    assert store.smembers(keys.BUDGET_HOLDERS) == set()
    assert budgets.read_budget(store, "all")["spent_tokens"] == 840


def test_a_cleared_and_set_again_budget_is_not_released_by_older_reservations(store):
    budgets.set_budget(store, "all", None, 1000, "month")
    spend = budgets.RedisSpend(store, "chat:c1", ["all"], "lease-1")
    rid = spend.reserve(Charge(300, 0))
    budgets.clear_budget(store, "all")
    budgets.set_budget(store, "all", None, 1000, "month")
    spend.settle(rid, Charge(300, 0))
    out = budgets.read_budget(store, "all")
    assert (out["spent_tokens"], out["reserved_tokens"]) == (0, 0)


def test_a_new_window_starts_from_nothing_spent(store):
    budgets.set_budget(store, "all", None, 1000, "day")
    store.hset(keys.budget("all"), mapping={"window": "2000-01-01", "spent_tokens": 999})
    spend = budgets.RedisSpend(store, "chat:c1", ["all"], "lease-1")
    spend.reserve(Charge(900, 0))
    assert budgets.read_budget(store, "all")["reserved_tokens"] == 900


# -- the loop --------------------------------------------------------------------------------------


class MemorySpend:
    """A `Spend` that records what the loop asks (no limits unless `refuse` says which reservation to refuse)."""

    def __init__(self, refuse: int | None = None) -> None:
        self.reserved: list[Charge] = []
        self.settled: dict[str, Charge] = {}
        self.refuse = refuse

    def reserve(self, worst: Charge) -> str:
        if self.refuse is not None and len(self.reserved) + 1 == self.refuse:
            raise BudgetExceeded("budget_exceeded: the budget of user:u is spent", scope="user:u")
        self.reserved.append(worst)
        return f"r{len(self.reserved)}"

    def settle(self, reservation: str, actual: Charge) -> bool:
        assert reservation not in self.settled
        self.settled[reservation] = actual
        return True


def _run(kit: Kit, script: list[ScriptedReply], spend: MemorySpend, edge: MemoryEdge | None = None) -> LoopState:
    state = LoopState()
    run_loop_config = replace(CONFIG, price=PRICE)
    from agent.loop.run import run_loop

    run_loop(
        list(HISTORY), state, provider=ScriptedProvider(script), tools=kit.tools, edge=edge or kit.edge,
        cancel=CancelToken(), config=run_loop_config, spend=spend,
    )
    return state


def test_every_attempt_is_reserved_and_settled_to_what_it_cost():
    """A discarded attempt and the answer: each reserved at the worst case first, settled to its usage after; the
    unit's cost is what the settlements charged, and the step's record names its reservations."""
    kit, spend = Kit(), MemorySpend()
    broken = replace(reply_fault("stall", partial="he"), input_tokens=40, output_tokens=3)
    state = _run(kit, [broken, replace(reply_text("hello"), input_tokens=40, output_tokens=7)], spend)
    assert len(spend.reserved) == 2 and set(spend.settled) == {"r1", "r2"}
    assert all(worst.tokens >= CONFIG.max_tokens for worst in spend.reserved)
    assert sum(c.nanos for c in spend.settled.values()) == round(state.usage.cost_usd * 1e9)
    assert spend.settled["r2"] == Charge(47, 40 * 3000 + 7 * 15000)
    assert kit.edge.recorded("model:0")["reservations"] == ["r1", "r2"]


def test_a_refused_reservation_sends_nothing_and_fails_the_unit_as_budget_exceeded():
    kit, spend = Kit(), MemorySpend(refuse=1)
    with pytest.raises(BudgetExceeded) as refused:
        _run(kit, [reply_text("never sent")], spend)
    assert refused.value.failure_class == "budget_exceeded" and "user:u" in str(refused.value)
    assert kit.edge.recorded("model:0") is None and spend.settled == {}


def test_a_replayed_step_reserves_and_charges_nothing():
    """The journal answers the step: no attempt, so no reservation; its cost is counted into usage from the record."""
    kit, first = Kit(), MemorySpend()
    done = _run(kit, [replace(reply_text("hi"), input_tokens=10, output_tokens=2)], first)
    again = MemorySpend()
    replayed = _run(kit, [], again, edge=kit.edge)
    assert again.reserved == [] and again.settled == {}
    assert replayed.usage.cost_usd == done.usage.cost_usd == (10 * 3000 + 2 * 15000) / 1e9


def test_an_attempt_the_rate_gate_sent_back_to_the_queue_costs_nothing() -> None:
    """The shared rate limits refuse an attempt inside its reservation (the gate waits in the provider): nothing was
    sent, so the reservation settles to nothing, not to the worst case."""
    from agent.loop.spend import Charge, Meter
    from agent.provider.rate_gate import RateLimited

    settled: list[tuple[str, Charge]] = []

    class Held:
        def reserve(self, worst: Charge) -> str:
            return "r1"

        def settle(self, reservation: str, actual: Charge) -> bool:
            settled.append((reservation, actual))
            return True

    meter = Meter(Held(), Charge(5000, 9000), None)
    with pytest.raises(RateLimited), meter.attempt():
        raise RateLimited(30.0, "retry-after")
    assert settled == [("r1", Charge(0, 0))] and meter.settled == ["r1"]


def test_an_attempt_whose_preflight_found_the_lease_lost_costs_nothing() -> None:
    """A read tool's result leads the next attempt's preflight (tasks/store/preflight.py): a lease found lost there
    ends the execution before anything is sent, so the attempt's reservation settles to nothing; a lease lost while
    it streamed (a live text flush) may have been billed: the worst case."""
    from agent.errors import LeaseLost, LeaseLostUnsent
    from agent.loop.spend import Charge, Meter

    settled: list[tuple[str, Charge]] = []

    class Held:
        def reserve(self, worst: Charge) -> str:
            return f"r{len(settled) + 1}"

        def settle(self, reservation: str, actual: Charge) -> bool:
            settled.append((reservation, actual))
            return True

    meter = Meter(Held(), Charge(5000, 9000), None)
    with pytest.raises(LeaseLostUnsent), meter.attempt():
        raise LeaseLostUnsent("lease lost")
    with pytest.raises(LeaseLost), meter.attempt():
        raise LeaseLost("lease lost")
    assert settled == [("r1", Charge(0, 0)), ("r2", Charge(5000, 9000))]


def test_a_deferred_reservation_goes_with_the_gates_admission_and_refuses_there(store):
    """Behind the rate gate the reservation waits for the admission's round trip: a refusal raises from the
    admission (before anything is sent), a hold is settled as any other, and one withdrawn before its gate asked
    (the attempt stopped first) was never made: nothing held, nothing to settle."""
    from tasks.store.rate_limits import RedisGate

    gate = RedisGate(store, "anthropic|local|k")
    budgets.set_budget(store, "chat:c1", None, 1_000, "total")
    spend = budgets.RedisSpend(store, "chat:c1", ["chat:c1"], "lease-1", deferred=True)
    rid = spend.reserve(Charge(600, 0))
    assert budgets.read_budget(store, "chat:c1")["reserved_tokens"] == 0  # not sent yet
    assert gate.admit("m", None, "a1", 0, 100).admitted
    assert budgets.read_budget(store, "chat:c1")["reserved_tokens"] == 600
    refused = spend.reserve(Charge(600, 0))
    with pytest.raises(BudgetExceeded):
        gate.admit("m", None, "a2", 0, 100)
    assert spend.settle(refused, Charge(0, 0)) is False
    assert spend.settle(rid, Charge(50, 0)) is True
    withdrawn = spend.reserve(Charge(600, 0))
    assert spend.settle(withdrawn, Charge(0, 0)) is False
    assert gate.admit("m", None, "a3", 0, 100).admitted  # it does not go with a later admission either
    assert budgets.read_budget(store, "chat:c1")["spent_tokens"] == 50
    assert budgets.read_budget(store, "chat:c1")["reserved_tokens"] == 0

