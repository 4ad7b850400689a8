"""Hedged calls under any mix of latencies and outcomes (hypothesis, virtual time).

Each example runs ``lb.call(fn, hedge=...)`` requests on Trio's MockClock, each attempt
taking a drawn time and ending in a drawn outcome. Whatever the draws:

- the answer is the earliest-finishing success among the attempts that were sent (or,
  when none succeeded, the last failure is raised);
- never more than ``max_attempts`` attempts of a request are in flight at once, and never
  more than ``max(attempts, max_attempts)`` in all;
- hedges sent never exceed ``1 + max_extra_load * requests``;
- the pool's counters remember exactly the attempts that ended on their own: successes and
  faults; a loser cancelled by the winner is counted nowhere, and nothing is left in flight.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

import poise_py as poise
from poise_py import Fault

ATTEMPT = st.tuples(st.integers(1, 400), st.sampled_from(["ok", "ok", "ok", "transient", "caller"]))
"""One attempt: milliseconds it takes, and how it ends."""


@settings(max_examples=60, deadline=None)
@given(
    requests=st.lists(st.lists(ATTEMPT, min_size=4, max_size=4), min_size=1, max_size=6),
    delay_ms=st.integers(1, 300),
    max_attempts=st.integers(2, 3),
    max_extra_load=st.sampled_from([0.02, 0.5, 1.0]),
)
def test_a_hedged_call_answers_with_the_first_success_and_counts_only_what_ended_by_itself(
    requests: list[list[tuple[int, str]]], delay_ms: int, max_attempts: int, max_extra_load: float
) -> None:
    hedge = poise.Hedge(delay=delay_ms / 1000, max_attempts=max_attempts, max_extra_load=max_extra_load)

    async def main() -> None:
        lb = poise.LoadBalancer(
            poise.StaticDiscovery([poise.Endpoint(f"e{i}") for i in range(5)]),
            policy=poise.RoundRobin(),
            circuit=poise.CircuitPolicy(consecutive_failures=1000, max_ejection_percent=0.0),
            retry_budget=poise.RetryBudget(min_per_second=1000),
        )
        ended = {"ok": 0, "fault": 0}
        async with lb:
            for plan in requests:
                sent: list[tuple[float, int, str]] = []  # (finish time, index, outcome) of each attempt
                in_flight = [0, 0]
                attempt = attempts_of(plan, sent, in_flight, ended)
                try:
                    answer = await lb.call(attempt, hedge=hedge, attempts=4)
                except poise.FaultError as exc:
                    answer = None
                    failed_at = {f"attempt {i}": t for t, i, _ in sent}[str(exc)]
                    # no success finished before the failure that ended the request
                    assert not any(o == "ok" and t < failed_at for t, _, o in sent)
                assert len(sent) <= max(4, max_attempts)
                assert in_flight[1] <= max_attempts
                successes = sorted((t, i) for t, i, o in sent if o == "ok")
                if answer is not None:
                    assert successes, "an answer without a success"
                    assert answer == f"attempt {successes[0][1]}"  # the earliest success won
            stats = lb.statistics()
        pool = stats.pool
        assert stats.inflight == 0
        assert pool.successes == ended["ok"]
        assert sum(pool.faults.values()) == ended["fault"]
        assert pool.cancellations == 0  # every loser was superseded: counted nowhere
        assert pool.issued == ended["ok"] + ended["fault"]
        assert pool.hedges_sent <= 1 + max_extra_load * pool.hedged_requests + 1e-9

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def attempts_of(
    plan: list[tuple[int, str]], sent: list[tuple[float, int, str]], in_flight: list[int], ended: dict[str, int]
) -> Callable[[poise.Endpoint], Awaitable[str]]:
    """The call of one request: its n-th attempt takes ``plan[n]``, recorded in ``sent`` and ``in_flight``."""

    async def attempt(endpoint: poise.Endpoint) -> str:
        index = len(sent)
        took, outcome = plan[index]
        finish = trio.current_time() + took / 1000
        while any(t == finish for t, _, _ in sent):  # no ties: "first" must mean one attempt
            finish += 1e-6
        sent.append((finish, index, outcome))
        in_flight[0] += 1
        in_flight[1] = max(in_flight[1], in_flight[0])
        try:
            await trio.sleep_until(finish)
        finally:
            in_flight[0] -= 1
        if outcome == "transient":
            ended["fault"] += 1
            raise poise.FaultError(Fault.TRANSIENT, f"attempt {index}")
        if outcome == "caller":
            ended["fault"] += 1
            raise poise.FaultError(Fault.CALLER, f"attempt {index}")
        ended["ok"] += 1
        return f"attempt {index}"

    return attempt
