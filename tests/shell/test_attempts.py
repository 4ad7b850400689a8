"""The one retry driver (``lb._internals.attempts``) that lb.call, the httpx transport and the gRPC channel share."""

from __future__ import annotations

import anyio
import pytest

import poise_py as poise
from tests.support.clocks import FakeClock

pytestmark = pytest.mark.anyio


def balancer(*ids: str, clock: FakeClock | None = None) -> poise.LoadBalancer:
    return poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint(i) for i in ids]),
        policy=poise.RoundRobin(),
        clock=clock or FakeClock(),
    )


def faults(lb: poise.LoadBalancer, endpoint_id: str) -> dict[poise.Fault, int]:
    return dict(lb.statistics().endpoints[endpoint_id].faults)


async def test_a_success_ends_the_request_and_succeeds_its_permit() -> None:
    lb = balancer("a", "b")
    async with lb:
        tries = lb._internals.attempts(3)
        seen = []
        async for attempt in tries:
            async with attempt:
                seen.append(attempt.endpoint.id)
                break
        (tried,) = seen
        assert lb.statistics().endpoints[tried].successes == 1
        assert lb.snapshot()[tried].inflight == 0


async def test_a_failure_is_classified_reported_and_retried_elsewhere() -> None:
    lb = balancer("a", "b", "c")
    async with lb:
        tries = lb._internals.attempts(3)
        seen = []
        async for attempt in tries:
            async with attempt:
                seen.append(attempt.endpoint.id)
                if len(seen) < 3:
                    raise ConnectionResetError("gone")
                result = attempt.endpoint.id
                break
        assert sorted(seen) == ["a", "b", "c"]  # each attempt avoids the endpoints already tried
        assert result == seen[2]
        assert [faults(lb, i)[poise.Fault.SUSPECT] for i in seen] == [1, 1, 0]
        assert [a.endpoint_id for a in tries.history] == seen[:2]


async def test_a_caller_fault_ends_the_request_at_once_annotated() -> None:
    lb = balancer("a", "b")
    async with lb:
        tries = lb._internals.attempts(3)
        with pytest.raises(ValueError, match="bad request") as info:
            async for attempt in tries:
                async with attempt:
                    raise ValueError("bad request")  # the default classifier: CALLER
        assert [a.fault for a in info.value.poise_attempts] == [poise.Fault.CALLER]  # type: ignore[attr-defined]
        assert any("1 attempt(s)" in note for note in info.value.__notes__)


async def test_with_every_endpoint_tried_the_last_real_error_is_the_answer_not_a_selection_error() -> None:
    lb = balancer("a", "b")
    async with lb:
        tries = lb._internals.attempts(5)
        with pytest.raises(ConnectionResetError, match="b") as info:
            async for attempt in tries:
                async with attempt:
                    raise ConnectionResetError(attempt.endpoint.id)
            tries.outcome()
        assert len(info.value.poise_attempts) == 2  # type: ignore[attr-defined]
        assert lb.retries_denied == 0  # stopped at the pool's size without asking the budget


async def test_a_failed_result_is_kept_as_the_answer_and_discarded_only_when_another_attempt_starts() -> None:
    lb = balancer("a", "b")
    discarded: list[str] = []

    async def discard(result: str) -> None:
        discarded.append(result)

    async with lb:
        tries = lb._internals.attempts(3, discard=discard)
        follows = []
        async for attempt in tries:
            async with attempt:
                follows.append(attempt.failed(poise.Fault.SUSPECT, result=f"503 from {attempt.endpoint.id}"))
        assert follows == [True, False]  # the pool's two endpoints tried: no third attempt
        first, second = (a.endpoint_id for a in tries.history)
        assert discarded == [f"503 from {first}"]  # the second attempt replaced it
        assert tries.outcome() == f"503 from {second}"  # the last answer, not NoEligibleEndpoints


async def test_a_cancelled_attempt_is_neither_a_success_nor_a_failure() -> None:
    lb = balancer("a", "b")
    async with lb:
        tries = lb._internals.attempts(3)
        seen = []
        with anyio.CancelScope() as scope:
            async for attempt in tries:
                async with attempt:
                    seen.append(attempt.endpoint.id)
                    scope.cancel()
                    await anyio.sleep(1)
        (tried,) = seen
        counters = lb.statistics().endpoints[tried]
        assert (counters.successes, counters.cancellations, sum(counters.faults.values())) == (0, 1, 0)
        assert lb.snapshot()[tried].inflight == 0


async def test_the_time_left_is_read_on_the_balancers_clock_and_a_spent_deadline_stops_retries() -> None:
    clock = FakeClock()
    lb = balancer("a", "b", "c", clock=clock)
    async with lb:
        tries = lb._internals.attempts(3, timeout=2.0)
        lefts = []
        with pytest.raises(TimeoutError):
            async for attempt in tries:
                async with attempt:
                    lefts.append(tries.time_left())
                    clock.advance(1.5)  # the injected clock, not time.monotonic()
                    raise TimeoutError
        assert lefts == [2.0, 0.5]  # the third attempt would have had no time at all
        assert len(tries.history) == 2


async def test_several_attempts_may_be_in_flight_at_once_each_on_its_own_permit() -> None:
    lb = balancer("a", "b", "c")
    async with lb:
        tries = lb._internals.attempts(3)
        first = tries.next()
        second = tries.next()  # a hedge: started while the first is in flight
        assert first is not None
        assert second is not None
        assert first.endpoint.id != second.endpoint.id
        async with second:
            pass  # the winner
        first.permit.cancel()  # the loser: cancelled through its permit, no strike
        async with first:
            pass
        assert lb.statistics().endpoints[second.endpoint.id].successes == 1
        assert lb.statistics().endpoints[first.endpoint.id].cancellations == 1


async def test_the_first_selection_error_is_the_answer_when_nothing_was_tried() -> None:
    lb = balancer("a")
    async with lb:
        lb.set_status("a", poise.AdminStatus.DISABLED)
        with pytest.raises(poise.NoEligibleEndpoints):
            async for _ in lb._internals.attempts(3):
                pass
