"""The fleet core (``_core/_fleet.py``) with plain floats: no event loop, no storage I/O.

Each test builds a pure :class:`Pool` and a :class:`FleetCore` over it and answers the
operations the core asks for, either by hand (what a step decides) or from :class:`Ledger`,
a synchronous model of the storage's fenced operations (the rules of
``InMemoryStorage``, protocol 2, taking ``now``). A hypothesis machine runs three balancers'
cores over one ledger with every interleaving of operations, acquires, results, timers and
operator statuses.
"""

from __future__ import annotations

import collections
import random
import subprocess
import sys
from pathlib import Path

import attrs
import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import poise_py as poise
from poise_py import AdminStatus, CircuitState, SharedState
from poise_py._coordination._protocol import OpenWait, ProbeReport, Reply
from poise_py._core._circuit import Cause, Ticket, Transition
from poise_py._core._fleet import FleetCore
from poise_py._core._fleet_actions import (
    BeginHalfOpen,
    Close,
    LeaseProbe,
    Operation,
    Read,
    ReadChanges,
    RecordUnusable,
    ReportProbe,
    StorageLost,
    StorageRegained,
    TripOpen,
)
from poise_py._core._listener import NullListener
from poise_py._core._pool import Pool
from poise_py._core._record import Member

_C, _O, _H = CircuitState.CLOSED, CircuitState.OPEN, CircuitState.HALF_OPEN

POLICY = poise.CircuitPolicy(
    consecutive_failures=1,
    minimum_volume=1,
    permitted_probes=1,
    escalation=poise.Escalation(base=5.0, maximum=5.0, jitter=0.0),
    max_ejection_percent=1.0,
)
SYNC = 1.0
LEASE = 3600.0


class Ledger:
    """The storage's fenced operations, synchronous, on the caller's ``now`` (one clock for all)."""

    def __init__(self) -> None:
        self.records: dict[str, SharedState] = {}

    def perform(self, operation: Operation, now: float) -> object:
        match operation:
            case Read(keys=keys):
                return [self._answer(self._load(k), now) for k in keys]
            case TripOpen(key=key, expected_version=version, wait=wait):
                r = self._load(key)
                if r.version != version or r.state is _O:
                    return self._refuse(r, now)
                failed = r.failed_rounds + 1 if r.state is _H else r.failed_rounds
                return self._save(
                    key,
                    r,
                    now,
                    state=_O,
                    failed_rounds=failed,
                    opened_at=now,
                    reopen_at=now + wait.duration(failed, 2),
                    probes_permitted=0,
                    probes_remaining=0,
                    probes_completed=0,
                )
            case BeginHalfOpen(key=key, expected_version=version, permitted=permitted, lease=lease):
                r = self._load(key)
                if r.version != version or r.state is _C or now < (r.reopen_at or 0.0):
                    return self._refuse(r, now)
                return self._save(
                    key,
                    r,
                    now,
                    state=_H,
                    reopen_at=now + lease,
                    probes_permitted=permitted,
                    probes_remaining=permitted,
                    probes_completed=0,
                )
            case LeaseProbe(key=key, expected_version=version):
                r = self._load(key)
                if r.version != version or r.state is not _H or r.probes_remaining <= 0 or now >= (r.reopen_at or 0):
                    return self._refuse(r, now)
                return self._save(key, r, now, probes_remaining=r.probes_remaining - 1)
            case ReportProbe(key=key, expected_version=version, report=report):
                r = self._load(key)
                if r.version != version or r.state is not _H:
                    return self._refuse(r, now)
                if report is ProbeReport.SUCCEEDED:
                    return self._save(key, r, now, probes_completed=r.probes_completed + 1)
                return self._save(key, r, now, probes_remaining=min(r.probes_remaining + 1, r.probes_permitted))
            case Close(key=key, expected_version=version):
                r = self._load(key)
                if r.version != version or r.state is not _H:
                    return self._refuse(r, now)
                return self._save(
                    key,
                    r,
                    now,
                    state=_C,
                    failed_rounds=0,
                    opened_at=None,
                    reopen_at=None,
                    probes_permitted=0,
                    probes_remaining=0,
                    probes_completed=0,
                )
            case ReadChanges():
                raise AssertionError("the ledger speaks protocol 2: no incremental polls")

    def _load(self, key: str) -> SharedState:
        return self.records.get(key, SharedState())

    @staticmethod
    def _answer(r: SharedState, now: float) -> SharedState:
        return attrs.evolve(r, storage_time=now)

    def _refuse(self, r: SharedState, now: float) -> Reply:
        return Reply(applied=False, state=self._answer(r, now))

    def _save(self, key: str, r: SharedState, now: float, **changes: object) -> Reply:
        version = r.version + 1 if "state" in changes else r.version
        new = attrs.evolve(r, version=version, protocol_version=2, **changes)  # type: ignore[arg-type]
        self.records[key] = new
        return Reply(applied=True, state=self._answer(new, now))


class _ToFleet(NullListener):
    """The pool's reports the fleet core hears, as the balancer's listener passes them on."""

    def __init__(self, member: FleetMember) -> None:
        self.member = member

    def transition(self, state: Member, transition: Transition) -> None:
        self.member.core.moved(state, transition)

    def probe_result(self, state: Member) -> None:
        self.member.core.probe_result(state)


class FleetMember:
    """One balancer's pure side: its pool and its fleet core, wired as the balancer wires them."""

    def __init__(self, seed: int, *ids: str, sync_interval: float = SYNC) -> None:
        self.pool = Pool(POLICY, poise.RoundRobin(), random.Random(seed), listener=_ToFleet(self))
        self.core = FleetCore(
            self.pool,
            POLICY,
            random.Random(seed),
            sync_interval=sync_interval,
            full_poll_interval=30.0,
            probe_lease=LEASE,
            escalation=POLICY.escalation,
            incremental=False,
        )
        self.pool.apply(0.0, added=[poise.Endpoint(i) for i in ids or ("a",)])

    def state(self, endpoint_id: str = "a") -> Member:
        return self.pool.members[endpoint_id]

    def run(self, ledger: Ledger, now: float) -> None:
        """Perform every operation of the running job on ``ledger`` (all at ``now``)."""
        while (operation := self.core.operation) is not None:
            self.core.complete(now, ledger.perform(operation, now))

    def sync(self, ledger: Ledger, now: float, *, poll: bool = True) -> None:
        assert self.core.begin(now, poll=poll)
        self.run(ledger, now)

    def trip(self, now: float, endpoint_id: str = "a") -> None:
        state, ticket, _, _ = self.pool.select(now, exclude=[i for i in self.pool.members if i != endpoint_id])
        self.pool.complete(state, ticket, poise.Fault.SUSPECT, now)


def started(ledger: Ledger, *ids: str, seed: int = 0, now: float = 0.0, sync_interval: float = SYNC) -> FleetMember:
    member = FleetMember(seed, *ids, sync_interval=sync_interval)
    member.core.start(now)
    member.run(ledger, now)
    assert member.core.connected
    return member


def test_the_first_job_reads_every_record_and_leases_every_circuit() -> None:
    member = FleetMember(0, "a", "b")
    member.core.start(0.0)
    assert member.core.operation == Read(("a", "b"))
    assert not member.core.connected
    member.core.complete(0.0, [SharedState(), SharedState()])
    assert member.core.operation is None
    assert member.core.connected
    assert all(s.circuit.leased for s in member.pool.members.values())


def test_a_local_trip_is_published_and_retimed_to_the_storages_deadline() -> None:
    ledger = Ledger()
    member = started(ledger, sync_interval=60.0)
    member.trip(1.0)
    assert member.core.wanted
    assert member.core.start_wanted(1.0)
    operation = member.core.operation
    assert isinstance(operation, TripOpen)
    assert (operation.key, operation.expected_version) == ("a", 0)
    assert isinstance(operation.wait, OpenWait)
    reply = Reply(
        applied=True, state=SharedState(state=_O, version=1, opened_at=100.0, reopen_at=108.0, storage_time=100.0)
    )
    member.core.complete(2.0, reply)
    assert member.core.operation is None
    assert member.core.counters.published == 1
    assert member.state().circuit.state is _O
    assert member.core.mirrored_version(member.state()) == 1
    # The shared deadline, on this balancer's clock: 2.0 + (108 - 100).
    assert member.core.next_deadline() == 10.0


def test_another_instances_trip_is_adopted_at_the_next_poll() -> None:
    ledger = Ledger()
    writer, reader = started(ledger, seed=0), started(ledger, seed=1)
    writer.trip(1.0)
    writer.core.start_wanted(1.0)
    writer.run(ledger, 1.0)
    assert ledger.records["a"].state is _O
    assert reader.state().circuit.state is _C
    reader.sync(ledger, 2.0)
    assert reader.state().circuit.state is _O
    assert reader.core.counters.adopted == 1


def test_a_storage_failure_unleases_every_circuit_and_reports_the_outage_once() -> None:
    ledger = Ledger()
    member = started(ledger, "a", "b")
    assert member.core.begin(1.0, poll=True)
    error = ConnectionError("down")
    member.core.fail(1.5, "down", error)
    assert not member.core.connected
    assert not any(s.circuit.leased for s in member.pool.members.values())
    assert member.core.events() == [StorageLost(at=1.5, reason="down", error=error)]
    assert member.core.counters.failures == 1
    assert member.core.counters.fallbacks == 1
    # One retry per sync_interval, from the failure: the timer is the retry.
    assert member.core.next_deadline() == 2.5
    member.core.handle_timer(2.0)
    assert not member.core.wanted
    member.core.handle_timer(2.5)
    assert member.core.start_wanted(2.5)
    member.core.fail(2.5, "down", error)
    assert member.core.events() == []  # the same outage: not reported again
    member.core.handle_timer(3.5)
    member.core.start_wanted(3.5)
    member.run(ledger, 3.5)
    assert member.core.connected
    assert member.core.events() == [StorageRegained(at=3.5)]
    assert all(s.circuit.leased for s in member.pool.members.values())


def test_a_circuit_that_tripped_while_the_storage_was_away_is_published_on_reconnection() -> None:
    ledger = Ledger()
    member = started(ledger)
    member.core.begin(1.0, poll=True)
    member.core.fail(1.0, "down", ConnectionError("down"))
    member.trip(1.2)  # local, unleased: its own timer
    assert member.state().circuit.state is _O
    member.core.handle_timer(2.0)
    member.core.start_wanted(2.0)
    member.run(ledger, 2.0)
    assert ledger.records["a"].state is _O
    assert member.core.counters.published == 1


def test_an_unusable_record_is_reported_once_and_its_circuit_decides_locally() -> None:
    member = FleetMember(0, "a", "b")
    member.core.start(0.0)
    member.core.complete(0.0, [SharedState(version=-1, problem="wrong type"), SharedState()])
    assert member.core.events() == [RecordUnusable(at=0.0, endpoint_id="a", problem="wrong type")]
    assert not member.state("a").circuit.leased
    assert member.state("b").circuit.leased
    member.core.begin(1.0, poll=True)
    member.core.complete(1.0, [SharedState(version=-1, problem="wrong type"), SharedState()])
    assert member.core.events() == []  # the same episode
    assert member.core.counters.poisoned == 1


def half_open_round(ledger: Ledger, *members: FleetMember) -> float:
    """Trip "a" on the first member, publish, and let the shared deadline pass: returns the time."""
    first = members[0]
    first.trip(1.0)
    first.core.start_wanted(1.0)
    first.run(ledger, 1.0)
    for m in members[1:]:
        m.sync(ledger, 1.0)
    return 7.0  # past the 5 s shared wait


def test_a_half_open_round_leases_only_where_there_is_demand() -> None:
    ledger = Ledger()
    idle, busy = started(ledger, seed=0), started(ledger, seed=1)
    now = half_open_round(ledger, idle, busy)
    for m in (idle, busy):
        m.core.handle_timer(now)
        m.core.start_wanted(now)
        m.run(ledger, now)
    assert ledger.records["a"].state is _H
    assert idle.core.counters.leases == busy.core.counters.leases == 0  # nobody asked yet
    with pytest.raises(poise.NoEligibleEndpoints):
        busy.pool.select(now)
    busy.core.refused(now)
    assert busy.core.wanted  # a waiting round: the refusal asks for a job at once
    busy.core.start_wanted(now)
    assert isinstance(busy.core.operation, LeaseProbe)
    busy.run(ledger, now)
    assert busy.core.counters.leases == 1
    assert busy.pool.select(now)[1].probe
    assert ledger.records["a"].probes_remaining == 0


def test_an_endpoint_excluded_here_never_leases_and_hands_back_its_free_slot() -> None:
    ledger = Ledger()
    member = started(ledger)
    now = half_open_round(ledger, member)
    member.core.handle_timer(now)
    member.core.start_wanted(now)
    member.run(ledger, now)
    member.core.refused(now)
    member.core.start_wanted(now)
    member.run(ledger, now)
    assert member.core.counters.leases == 1
    member.pool.set_admin("a", AdminStatus.DRAINING)
    member.core.refused(now)
    member.core.begin(now, poll=False, timers=False)
    assert member.core.operation == ReportProbe("a", expected_version=2, report=ProbeReport.RELEASED)
    member.run(ledger, now)
    assert member.core.counters.released == 1
    assert ledger.records["a"].probes_remaining == 1
    member.core.refused(now)
    member.core.begin(now, poll=False, timers=False)
    assert member.core.operation is None  # no lease for an endpoint this balancer drains


def test_a_lapsed_round_a_timed_job_learns_of_through_a_stale_version_begins_at_once() -> None:
    """A balancer that sits the episode out (an active check passed here, so its circuit
    stays CLOSED and mirrors nothing) still begins the fleet's due rounds. Its timed job
    tries with the version it last saw; the storage answers with a newer round that has
    lapsed already. That answer is news: the balancer begins the fresh round at once, as
    the coordinator always did, not a whole sync_interval later at its next poll."""
    ledger = Ledger()
    first = started(ledger, seed=0)
    late = started(ledger, seed=1, sync_interval=100_000.0)  # it will not poll meanwhile
    state = late.state()
    passed = Transition(source=_O, target=_C, cause=Cause.HEALTH_CHECK_PASSED, epoch=state.circuit.epoch, at=0.5)
    late.core.moved(state, passed)
    late.core.start_wanted(0.5)
    late.run(ledger, 0.5)
    now = half_open_round(ledger, first, late)  # OPEN v1, due at 6.0; "late" holds v1
    assert state.circuit.state is _C
    first.core.handle_timer(now)
    first.core.start_wanted(now)
    first.run(ledger, now)  # the round v2, its leases lapsing at now + LEASE
    lapsed = now + LEASE + 1.0
    late.core.handle_timer(lapsed)
    assert late.core.start_wanted(lapsed)
    assert late.core.operation == BeginHalfOpen("a", expected_version=1, permitted=1, lease=LEASE)
    late.run(ledger, lapsed)  # refused: the record is the lapsed round v2 by now
    assert late.core.mirrored_version(state) == 2
    assert not late.core.wanted
    assert late.core.next_deadline() == lapsed  # due now, on the storage's answer
    late.core.handle_timer(lapsed)
    assert late.core.start_wanted(lapsed)
    assert late.core.operation == BeginHalfOpen("a", expected_version=2, permitted=1, lease=LEASE)
    late.run(ledger, lapsed)
    assert (ledger.records["a"].state, ledger.records["a"].version) == (_H, 3)
    deadline = late.core.next_deadline()
    assert deadline is not None
    assert deadline > lapsed  # acted on: nothing is due any more


def test_a_due_round_the_storage_still_refuses_waits_for_news_instead_of_firing_in_a_loop() -> None:
    """The storage refuses a due round and says nothing new (the same version, no time
    left): the timer does not fire again at once; the next poll retries."""
    ledger = Ledger()
    member = started(ledger, sync_interval=60.0)
    now = half_open_round(ledger, member)  # OPEN v1, due at 6.0; the next poll at 60.0
    member.core.handle_timer(now)
    assert member.core.start_wanted(now)
    assert isinstance(member.core.operation, BeginHalfOpen)
    refused = Reply(applied=False, state=attrs.evolve(ledger.records["a"], storage_time=now, reopen_at=now))
    member.core.complete(now, refused)
    assert member.core.operation is None
    assert member.core.next_deadline() == 60.0  # the next poll, not the refused deadline


def test_no_deadline_is_reported_while_a_job_runs_and_a_due_timer_asks_for_one_job() -> None:
    ledger = Ledger()
    member = FleetMember(0)
    assert member.core.next_deadline() is None  # not started
    member.core.start(0.0)
    assert member.core.busy
    assert member.core.next_deadline() is None
    member.run(ledger, 0.0)
    assert member.core.next_deadline() == SYNC
    member.core.handle_timer(0.5)
    assert not member.core.wanted
    member.core.handle_timer(1.0)
    assert member.core.wanted
    assert member.core.next_deadline() is None  # wanted: the worker has it
    assert member.core.start_wanted(1.0)
    assert member.core.operation == Read(("a",))  # the poll was due
    member.run(ledger, 1.0)
    assert member.core.next_deadline() == 2.0


def test_a_cancelled_operation_drops_its_job_and_the_next_job_starts_afresh() -> None:
    ledger = Ledger()
    member = started(ledger)
    member.core.begin(1.0, poll=True)
    member.core.abandon()
    assert not member.core.busy
    assert member.core.operation is None
    assert member.core.connected  # a cancellation is no storage failure
    member.sync(ledger, 2.0)
    assert member.core.counters.failures == 0


def test_a_reply_that_breaks_the_core_is_a_logged_crash_and_a_fallback() -> None:
    member = FleetMember(0)
    member.core.start(0.0)
    member.core.complete(0.0, [])  # one record short: zip(strict=True) raises
    events = member.core.events()
    assert [type(e).__name__ for e in events] == ["JobCrashed", "StorageLost"]
    assert not member.core.busy
    assert not member.core.connected


def test_close_hands_back_the_unused_leases() -> None:
    ledger = Ledger()
    member = started(ledger)
    now = half_open_round(ledger, member)
    member.core.handle_timer(now)
    member.core.start_wanted(now)
    member.run(ledger, now)
    member.core.refused(now)
    member.core.start_wanted(now)
    member.run(ledger, now)
    assert ledger.records["a"].probes_remaining == 0
    assert member.core.begin_close(now)
    member.run(ledger, now)
    assert ledger.records["a"].probes_remaining == 1


# -- every interleaving -----------------------------------------------------------------


N = 2


class FleetMachine(RuleBasedStateMachine):
    """Two cores over one ledger; operations of different balancers interleave one at a time."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.ledger = Ledger()
        self.members = [FleetMember(i, "a", "b") for i in range(N)]
        for m in self.members:
            m.core.start(self.now)
            m.run(self.ledger, self.now)  # connected from the start: the rules explore the fleet
        # lb, state, ticket, the shared version its balancer mirrored when it took the permit
        self.permits: list[tuple[int, Member, Ticket, int]] = []

    @rule(i=st.integers(0, N - 1))
    def perform_one_operation(self, i: int) -> None:
        core = self.members[i].core
        operation = core.operation
        if operation is not None:
            core.complete(self.now, self.ledger.perform(operation, self.now))

    @rule(i=st.integers(0, N - 1))
    def storage_fails(self, i: int) -> None:
        core = self.members[i].core
        if core.operation is not None:
            core.fail(self.now, "down", ConnectionError("down"))

    @rule(i=st.integers(0, N - 1), poll=st.booleans())
    def start_a_job(self, i: int, poll: bool) -> None:
        core = self.members[i].core
        core.handle_timer(self.now)
        if not core.start_wanted(self.now) and poll:
            core.begin(self.now, poll=True)

    @rule(i=st.integers(0, N - 1))
    def run_a_whole_job(self, i: int) -> None:
        m = self.members[i]
        m.core.handle_timer(self.now)
        if m.core.start_wanted(self.now) or m.core.begin(self.now, poll=True):
            while (operation := m.core.operation) is not None:
                self.never_a_lease_for_an_endpoint_its_own_status_excludes()
                m.core.complete(self.now, self.ledger.perform(operation, self.now))

    @rule(i=st.integers(0, N - 1), endpoint_id=st.sampled_from(["a", "b"]))
    def acquire(self, i: int, endpoint_id: str) -> None:
        m = self.members[i]
        other = "b" if endpoint_id == "a" else "a"
        try:
            state, ticket, _, _ = m.pool.select(self.now, exclude=[other])
        except poise.NoEligibleEndpoints:
            m.core.refused(self.now)
            return
        self.permits.append((i, state, ticket, m.core.mirrored_version(state)))

    @precondition(lambda self: self.permits)
    @rule(k=st.integers(0, 100), outcome=st.sampled_from(["succeed", "fail", "cancel"]))
    def finish(self, k: int, outcome: str) -> None:
        i, state, ticket, _ = self.permits.pop(k % len(self.permits))
        pool = self.members[i].pool
        if outcome == "cancel":
            pool.cancel(state, ticket)
        else:
            pool.complete(state, ticket, None if outcome == "succeed" else poise.Fault.SUSPECT, self.now)

    @rule(i=st.integers(0, N - 1), status=st.sampled_from([AdminStatus.AUTO, AdminStatus.DRAINING]))
    def operator(self, i: int, status: AdminStatus) -> None:
        self.members[i].pool.set_admin("a", status)

    @rule(seconds=st.sampled_from([0.5, 2.0, 6.0]))
    def advance(self, seconds: float) -> None:
        self.now += seconds  # never past the lease: its lapse deliberately starts a fresh round

    @invariant()
    def at_most_the_budget_of_probes_per_round_fleet_wide(self) -> None:
        per_round: collections.Counter[tuple[str, int]] = collections.Counter()
        for _, state, ticket, version in self.permits:
            if ticket.probe and ticket.epoch == state.circuit.epoch and state.circuit.leased:
                per_round[state.id, version] += 1
        assert all(n <= POLICY.permitted_probes for n in per_round.values()), per_round

    @invariant()
    def never_a_lease_for_an_endpoint_its_own_status_excludes(self) -> None:
        for m in self.members:
            operation = m.core.operation
            if isinstance(operation, LeaseProbe):
                assert m.pool.excluded(m.state(operation.key)) is None

    @invariant()
    def a_started_core_without_a_job_always_has_a_timer(self) -> None:
        for m in self.members:
            core = m.core
            deadline = core.next_deadline()
            assert (deadline is None) == (core.busy or core.wanted)

    def teardown(self) -> None:
        for i, state, ticket, _ in self.permits:
            self.members[i].pool.cancel(state, ticket)


FleetMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=50, deadline=None)
TestFleetMachine = FleetMachine.TestCase


def test_the_fleet_core_imports_nothing_async() -> None:
    script = (
        "import sys, types, importlib\n"
        "for name in ('anyio', 'trio', 'asyncio', 'sniffio', 'coredis', 'redis'):\n"
        "    sys.modules[name] = None\n"
        "package = types.ModuleType('poise_py')\n"
        f"package.__path__ = [{str(Path(poise.__file__).parent)!r}]\n"
        "sys.modules['poise_py'] = package\n"
        "importlib.import_module('poise_py._core._fleet')\n"
    )
    # the worktree's package, not the installed one
    subprocess.run([sys.executable, "-c", script], check=True, cwd=Path(__file__).parents[2])  # noqa: S603 - our own script
