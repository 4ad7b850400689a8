"""Hypothesis state machine over active health: probes, forced statuses and cancellations, interleaved.

It drives the pure scheduler through the runner's synchronous glue and a real pool, and
checks against a small model after every step: a forced status is never overwritten by a
probe of an earlier generation, at most one probe per endpoint is reserved, stale results
change nothing, cancellations classify nothing, and the pool's O(1) eligibility list
always agrees with the operator, the circuit and the classification.
"""

from __future__ import annotations

import random

import attrs
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import poise_py as poise
from poise_py import AdminStatus, Fault, HealthStatus, IneligibleReason
from poise_py._core._health_schedule import ProbeResult, ProbeToken
from poise_py._core._pool import Pool
from poise_py._core._record import Member
from poise_py._health_runner import HealthRunner

IDS = ("a", "b", "c")
FORCED = {
    AdminStatus.FORCED_HEALTHY: HealthStatus.HEALTHY,
    AdminStatus.FORCED_UNHEALTHY: HealthStatus.UNHEALTHY,
}


async def _probe(endpoint: poise.Endpoint) -> None:
    return None


@attrs.define
class Model:
    """What the scheduler should hold for one endpoint."""

    admin: AdminStatus = AdminStatus.AUTO
    status: HealthStatus = HealthStatus.UNKNOWN
    passes: int = 0
    failures: int = 0
    generation: int = 0
    reserved: ProbeToken | None = None


@attrs.define
class InFlight:
    token: ProbeToken
    state: Member
    epoch: int


class HealthMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.runner: HealthRunner | None = None
        self.pool: Pool | None = None
        self.models: dict[str, Model] = {}
        self.in_flight: list[InFlight] = []

    # -- set-up ------------------------------------------------------------------------

    @rule(
        healthy=st.integers(1, 3),
        unhealthy=st.integers(1, 3),
        admit_unknown=st.booleans(),
        uneject=st.booleans(),
        jitter=st.sampled_from([0.0, 0.3]),
    )
    @precondition(lambda self: self.runner is None)
    def build(self, healthy: int, unhealthy: int, admit_unknown: bool, uneject: bool, jitter: float) -> None:
        check = poise.HealthCheck(
            probe=_probe,
            interval=10.0,
            unhealthy_interval=2.0,
            healthy_threshold=healthy,
            unhealthy_threshold=unhealthy,
            admit_unknown=admit_unknown,
            uneject=uneject,
            jitter=jitter,
        )
        circuit = poise.CircuitPolicy(consecutive_failures=1, minimum_volume=1, max_ejection_percent=1.0)
        self.pool = Pool(circuit, poise.RoundRobin(), random.Random(5))
        self.runner = HealthRunner(check, self.pool, random.Random(6).random)

    def _parts(self) -> tuple[HealthRunner, Pool]:
        assert self.runner is not None
        assert self.pool is not None
        return self.runner, self.pool

    # -- membership --------------------------------------------------------------------

    @rule(endpoint_id=st.sampled_from(IDS))
    @precondition(lambda self: self.runner is not None)
    def add(self, endpoint_id: str) -> None:
        runner, pool = self._parts()
        if endpoint_id in pool.members:
            return
        pool.apply(self.now, added=[poise.Endpoint(endpoint_id)])
        runner.apply(self.now, [endpoint_id], ())
        self.models[endpoint_id] = Model()

    @rule(endpoint_id=st.sampled_from(IDS))
    @precondition(lambda self: self.runner is not None)
    def remove(self, endpoint_id: str) -> None:
        runner, pool = self._parts()
        if endpoint_id not in pool.members:
            return
        pool.apply(self.now, removed=[endpoint_id])
        runner.apply(self.now, (), [endpoint_id])
        del self.models[endpoint_id]

    # -- time and probes ---------------------------------------------------------------

    @rule(seconds=st.floats(0.0, 15.0))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        if self.pool is not None:
            self.pool.handle_timer(self.now)

    @rule()
    @precondition(lambda self: self.runner is not None)
    def reserve_due_probes(self) -> None:
        runner, pool = self._parts()
        for token in runner.scheduler.due(self.now):
            model = self.models[token.endpoint_id]
            assert model.admin is AdminStatus.AUTO, "a parked endpoint got a probe"
            assert model.reserved is None, "a second probe was reserved for one endpoint"
            assert token.generation == model.generation
            model.reserved = token
            state = pool.members[token.endpoint_id]
            self.in_flight.append(InFlight(token, state, state.circuit.epoch))

    def _view(self, endpoint_id: str) -> tuple[object, ...]:
        runner, _ = self._parts()
        if endpoint_id not in runner.scheduler:
            return ()
        v = runner.scheduler.snapshot(endpoint_id)
        return (v.status, v.generation, v.consecutive_passes, v.consecutive_failures, v.probing, v.probes)

    @rule(data=st.data(), result=st.sampled_from(ProbeResult))
    @precondition(lambda self: self.in_flight)
    def probe_returns(self, data: st.DataObject, result: ProbeResult) -> None:
        runner, _ = self._parts()
        probe = self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1)))
        token = probe.token
        model = self.models.get(token.endpoint_id)
        current = model is not None and model.reserved == token and probe.state.live
        before = self._view(token.endpoint_id)
        status = runner.settle(token, probe.state, result, self.now, epoch=probe.epoch)
        if not current:
            assert status is None, "a stale probe result was accepted"
            assert self._view(token.endpoint_id) == before, "a stale probe result changed the track"
            return
        assert model is not None
        model.reserved = None
        check = runner.check
        if result is ProbeResult.PASSED:
            model.failures = 0
            model.passes = min(model.passes + 1, check.healthy_threshold)
            if model.passes >= check.healthy_threshold:
                model.status = HealthStatus.HEALTHY
        else:
            model.passes = 0
            model.failures = min(model.failures + 1, check.unhealthy_threshold)
            if model.failures >= check.unhealthy_threshold:
                model.status = HealthStatus.UNHEALTHY
        assert status is model.status

    @rule(data=st.data())
    @precondition(lambda self: self.in_flight)
    def probe_is_cancelled(self, data: st.DataObject) -> None:
        runner, _ = self._parts()
        probe = self.in_flight.pop(data.draw(st.integers(0, len(self.in_flight) - 1)))
        model = self.models.get(probe.token.endpoint_id)
        before = self._view(probe.token.endpoint_id)
        runner.cancel(probe.token, self.now)
        after = self._view(probe.token.endpoint_id)
        assert after[:4] == before[:4], "a cancellation changed the classification"
        if model is not None and model.reserved == probe.token:
            model.reserved = None

    # -- operators and passive health --------------------------------------------------

    @rule(endpoint_id=st.sampled_from(IDS), status=st.sampled_from(AdminStatus))
    @precondition(lambda self: self.runner is not None)
    def set_status(self, endpoint_id: str, status: AdminStatus) -> None:
        runner, pool = self._parts()
        if endpoint_id not in pool.members:
            return
        state = pool.set_admin(endpoint_id, status)
        runner.set_admin(state, status, self.now)
        model = self.models[endpoint_id]
        if status is model.admin:
            return
        model.admin = status
        model.generation += 1
        model.reserved = None
        if status in FORCED:
            model.status = FORCED[status]
        if status is AdminStatus.AUTO:
            model.status = HealthStatus.UNKNOWN
            model.passes = model.failures = 0

    @rule(endpoint_id=st.sampled_from(IDS), fault=st.sampled_from([None, Fault.FATAL, Fault.PERMANENT]))
    @precondition(lambda self: self.runner is not None)
    def call(self, endpoint_id: str, fault: Fault | None) -> None:
        _, pool = self._parts()
        others = [i for i in IDS if i != endpoint_id]
        try:
            state, ticket, _, _ = pool.select(self.now, exclude=others)
        except poise.SelectionError:
            return
        pool.complete(state, ticket, fault, self.now)

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def a_forced_status_is_never_overwritten(self) -> None:
        if self.runner is None:
            return
        for endpoint_id, model in self.models.items():
            status = self.runner.scheduler.status(endpoint_id)
            if model.admin in FORCED:
                assert status is FORCED[model.admin]
            assert status is model.status

    @invariant()
    def one_reservation_per_endpoint_matching_the_model(self) -> None:
        if self.runner is None:
            return
        for endpoint_id, model in self.models.items():
            assert self.runner.scheduler.reserved(endpoint_id) == model.reserved
            assert self.runner.scheduler.generation(endpoint_id) == model.generation

    @invariant()
    def only_auto_endpoints_are_scheduled(self) -> None:
        if self.runner is None:
            return
        for endpoint_id, model in self.models.items():
            view = self.runner.scheduler.snapshot(endpoint_id)
            scheduled = view.next_probe_at is not None
            assert scheduled == (model.admin is AdminStatus.AUTO and model.reserved is None)

    @invariant()
    def eligibility_agrees_with_operator_circuit_and_health(self) -> None:
        if self.runner is None or self.pool is None:
            return
        check = self.runner.check
        for endpoint_id, model in self.models.items():
            state = self.pool.members[endpoint_id]
            if model.admin is AdminStatus.AUTO:
                if model.status is HealthStatus.UNHEALTHY:
                    health: IneligibleReason | None = IneligibleReason.UNHEALTHY
                elif model.status is HealthStatus.UNKNOWN and not check.admit_unknown:
                    health = IneligibleReason.UNCLASSIFIED
                else:
                    health = None
                gate_open = health is None
            else:
                gate_open = model.admin is AdminStatus.FORCED_HEALTHY
            expected = gate_open and state.circuit.accepting
            assert (state.pos >= 0) == expected
            assert (self.pool.refusal(state) is None) == expected


HealthMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
TestHealthMachine = HealthMachine.TestCase
