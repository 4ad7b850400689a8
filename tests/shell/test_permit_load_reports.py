"""Load reports through the permit and the httpx transport: what the snapshot shows, what WeightedByLoad reads."""

from __future__ import annotations

from collections import Counter

import httpx
import pytest

import poise_py as poise
from poise_py.contrib.httpx import balanced_client
from tests.support.clocks import FakeClock, static_lb

pytestmark = pytest.mark.anyio


async def test_a_permit_hands_its_report_to_the_endpoint_and_the_snapshot_shows_it(clock: FakeClock) -> None:
    async with static_lb("a", clock=clock) as lb:
        report = poise.LoadReport(cpu_utilization=0.5, qps=100.0, eps=10.0)
        clock.advance(3.0)
        async with lb.acquire() as permit:
            permit.report_load(report)
        snap = lb.snapshot()["a"]
        assert snap.load_report == report
        assert snap.load_reported_at == clock.now
        assert snap.load_weight == pytest.approx(100.0 / (0.5 + 10.0 / 100.0))


async def test_the_application_utilization_wins_over_the_cpus(clock: FakeClock) -> None:
    async with static_lb("a", clock=clock) as lb:
        async with lb.acquire() as permit:
            permit.report_load(poise.LoadReport(cpu_utilization=0.9, application_utilization=0.25, qps=50.0))
        assert lb.snapshot()["a"].load_weight == pytest.approx(200.0)


async def test_a_report_may_come_after_the_outcome_and_never_changes_it(clock: FakeClock) -> None:
    async with static_lb("a", clock=clock) as lb:
        permit = lb.acquire()
        permit.succeed()
        permit.report_load(poise.LoadReport(cpu_utilization=0.5, qps=10.0))
        snap = lb.snapshot()["a"]
        assert snap.load_weight == pytest.approx(20.0)
        assert snap.counters.successes == 1


async def test_a_report_without_qps_or_utilization_is_kept_but_makes_no_weight(clock: FakeClock) -> None:
    async with static_lb("a", clock=clock) as lb:
        async with lb.acquire() as permit:
            permit.report_load(poise.LoadReport(mem_utilization=0.7))
        snap = lb.snapshot()["a"]
        assert snap.load_report == poise.LoadReport(mem_utilization=0.7)
        assert snap.load_weight is None


async def test_an_endpoint_without_reports_shows_none(clock: FakeClock) -> None:
    async with static_lb("a", clock=clock) as lb:
        snap = lb.snapshot()["a"]
        assert (snap.load_report, snap.load_reported_at, snap.load_weight, snap.held_failures) == (None, None, None, 0)


@pytest.mark.parametrize("report", [{"cpu_utilization": 0.5}, "TEXT cpu_utilization=0.5", 0.5])
async def test_anything_but_a_load_report_is_refused(clock: FakeClock, report: object) -> None:
    async with static_lb("a", clock=clock) as lb, lb.acquire() as permit:
        with pytest.raises(poise.PermitError, match="LoadReport"):
            permit.report_load(report)  # type: ignore[arg-type]


async def test_weighted_by_load_follows_the_reports_given_through_permits(clock: FakeClock) -> None:
    sizes = {"small": 1.0, "big": 3.0}
    async with static_lb(*sizes, clock=clock, policy=poise.WeightedByLoad(blackout_period=1.0)) as lb:
        for _ in range(100):  # before any weight: round robin
            async with lb.acquire() as permit:
                permit.report_load(poise.LoadReport(cpu_utilization=0.5, qps=100.0 * sizes[permit.endpoint.id]))
        assert Counter(lb.snapshot()[e].counters.successes for e in sizes) == Counter({50: 2})
        clock.advance(2.0)
        picks: Counter[str] = Counter()
        for _ in range(400):
            async with lb.acquire() as permit:
                picks[permit.endpoint.id] += 1
        assert picks["big"] == pytest.approx(300, abs=2)


# -- the httpx transport reads the endpoint-load-metrics header --------------------------------


def backend(request: httpx.Request) -> httpx.Response:
    headers = {"endpoint-load-metrics": "TEXT cpu_utilization=0.25, rps_fractional=40, eps=2"}
    if request.url.host == "10.0.0.2":
        headers = {"endpoint-load-metrics-bin": "garbage!"}  # damaged: ignored, the call is fine
    return httpx.Response(200, headers=headers, text="ok")


async def test_the_transport_reads_each_answers_load_report(clock: FakeClock) -> None:
    eps = [poise.Endpoint("a", address=("10.0.0.1", 80)), poise.Endpoint("b", address=("10.0.0.2", 80))]
    async with poise.LoadBalancer(poise.StaticDiscovery(eps), clock=clock, policy=poise.RoundRobin()) as lb:
        async with balanced_client(lb, "http://svc", transport=httpx.MockTransport(backend)) as client:
            for _ in range(4):
                assert (await client.get("/")).text == "ok"
        a, b = lb.snapshot()["a"], lb.snapshot()["b"]
        assert a.load_report == poise.LoadReport(cpu_utilization=0.25, qps=40.0, eps=2.0)
        assert a.load_weight == pytest.approx(40.0 / (0.25 + 2.0 / 40.0))
        assert b.load_report is None
        assert b.counters.successes == 2


# -- quota: what a provider says is left of its rate limit --------------------------------------


async def test_a_permit_hands_its_quota_to_the_endpoint_and_the_snapshot_shows_it(clock: FakeClock) -> None:
    async with static_lb("a", "b", clock=clock) as lb:
        async with lb.acquire(exclude=["b"]) as permit:
            permit.report_quota(poise.Quota(requests_limit=60, requests_remaining=7, requests_reset=20.0))
        snap = lb.snapshot()["a"]
        assert (snap.quota_remaining, snap.quota_resets_at) == (7, None)
        assert lb.snapshot()["b"].quota_remaining is None


async def test_a_spent_quota_rests_the_endpoint_until_its_reset_with_no_strike(clock: FakeClock) -> None:
    async with static_lb("a", "b", clock=clock, policy=poise.RoundRobin()) as lb:
        async with lb.acquire(exclude=["b"]) as permit:
            permit.report_quota(poise.Quota(tokens_limit=1000, tokens_remaining=0, tokens_reset=30.0))
        snap = lb.snapshot()["a"]
        assert snap.eligible_reason is poise.IneligibleReason.QUOTA
        assert (snap.quota_remaining, snap.quota_resets_at) == (0, clock.now + 30.0)
        assert snap.state is poise.CircuitState.CLOSED
        assert snap.counters.successes == 1
        for _ in range(5):
            async with lb.acquire() as permit:
                assert permit.endpoint.id == "b"
        clock.advance(30.0)  # the selection that passes the reset ends the rest
        seen = set()
        for _ in range(4):
            async with lb.acquire() as permit:
                seen.add(permit.endpoint.id)
        assert seen == {"a", "b"}  # back at the reset, without a probe
        assert lb.snapshot()["a"].eligible_reason is None


async def test_a_tokens_only_quota_lowers_the_weight_by_its_share_and_caps_nothing(clock: FakeClock) -> None:
    async with static_lb("a", "b", clock=clock) as lb:
        async with lb.acquire(exclude=["b"]) as permit:
            permit.report_quota(poise.Quota(tokens_limit=1000, tokens_remaining=100))
        snap = lb.snapshot()["a"]
        assert snap.quota_remaining is None
        assert snap.concurrency_limit is None
        assert snap.effective_weight == pytest.approx(0.1)


async def test_no_report_is_nothing_said_so_the_readers_result_can_be_passed_as_it_is(clock: FakeClock) -> None:
    async with static_lb("a", clock=clock) as lb:
        async with lb.acquire() as permit:  # an ordinary answer: no rate-limit headers, no load report
            permit.report_quota(poise.quota_from_headers({"content-type": "application/json"}))
            permit.report_load(poise.load_report_from_headers({"content-type": "application/json"}))
        snap = lb.snapshot()["a"]
        assert (snap.quota_remaining, snap.load_report, snap.effective_weight) == (None, None, 1.0)
        assert snap.counters.successes == 1  # the call's outcome is its own


@pytest.mark.parametrize("quota", [{"requests_remaining": 1}, 3])
async def test_anything_but_a_quota_is_refused(clock: FakeClock, quota: object) -> None:
    async with static_lb("a", clock=clock) as lb, lb.acquire() as permit:
        with pytest.raises(poise.PermitError, match="Quota"):
            permit.report_quota(quota)  # type: ignore[arg-type]


def provider(request: httpx.Request) -> httpx.Response:
    if request.url.host == "10.0.0.1":  # spent: OpenAI's 429 with its headers
        headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m0s", "retry-after": "60"}
        return httpx.Response(429, headers=headers)
    headers = {"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "42"}
    return httpx.Response(200, headers=headers, text="ok")


async def test_the_transport_reads_each_answers_rate_limit_headers(clock: FakeClock) -> None:
    eps = [poise.Endpoint("a", address=("10.0.0.1", 80)), poise.Endpoint("b", address=("10.0.0.2", 80))]
    async with poise.LoadBalancer(poise.StaticDiscovery(eps), clock=clock, policy=poise.RoundRobin()) as lb:
        async with balanced_client(lb, "http://llm", transport=httpx.MockTransport(provider)) as client:
            statuses = sorted([(await client.get("/")).status_code for _ in range(2)])
        assert statuses == [200, 429]
        a, b = lb.snapshot()["a"], lb.snapshot()["b"]
        assert a.eligible_reason is not None  # rests on its quota (and its circuit honours the Retry-After, as before)
        assert a.quota_resets_at == clock.now + 60.0
        assert b.quota_remaining == 42


async def test_statistics_count_each_endpoints_load_reports_and_quota_rests(clock: FakeClock) -> None:
    async with static_lb("a", "b", clock=clock) as lb:
        for _ in range(3):
            async with lb.acquire(exclude=["b"]) as permit:
                permit.report_load(poise.LoadReport(cpu_utilization=0.5, qps=10.0))
        async with lb.acquire(exclude=["a"]) as permit:
            permit.report_quota(poise.Quota(requests_remaining=0, requests_reset=5.0))
        stats = lb.statistics().endpoints
        assert (stats["a"].load_reports, stats["a"].quota_rests) == (3, 0)
        assert (stats["b"].load_reports, stats["b"].quota_rests) == (0, 1)
        assert lb.snapshot()["b"].load_reported_at is None  # a quota is no load report
