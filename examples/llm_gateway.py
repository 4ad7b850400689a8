"""An LLM-gateway tier waterfall (seed 001), on Trio's virtual clock.

Run: ``python examples/llm_gateway.py`` (needs ``pip install 'poise_py[trio]'``).

Three provider tiers, as an API gateway would have them:

- T0 ``primary``: the preferred provider. It rate-limits us for a minute (HTTP 429,
  ``Retry-After: 60``), then recovers.
- T1 ``secondary``: its API key was revoked (HTTP 401). Permanent: blocked at once and
  never probed, so no user request is wasted on it every 30 s.
- T2 ``fallback``: always answers.

Every request goes through ``lb.call(..., attempts=3)``, which moves to another provider
after a TRANSIENT or PERMANENT fault. The rate limit recovers fast: ``primary`` is back
as soon as its Retry-After has passed, not after some longer health-filter window. All
on virtual time, so the minute passes instantly. Tier routing (``Endpoint(tier=)``)
sends every request to T0 while it is healthy, spills to T2 while T0 is out (T1 being
blocked), and comes back to T0 as soon as its probe succeeds (``docs/routing.md``).
"""

from __future__ import annotations

import logging
from collections import Counter

import trio
import trio.testing

import poise_py as poise


class Response:
    """The parts of an HTTP response that ``poise.classify.http()`` reads."""

    def __init__(self, status_code: int, headers: dict[str, str] | None = None) -> None:
        self.status_code = status_code
        self.headers = headers or {}


class ProviderError(Exception):
    """What a provider SDK raises on an HTTP error: it carries the response."""

    def __init__(self, provider: str, response: Response) -> None:
        super().__init__(f"{provider}: HTTP {response.status_code}")
        self.response = response


RATE_LIMITED_UNTIL = 60.0  # virtual seconds after start


async def complete(endpoint: poise.Endpoint, prompt: str, *, started: float) -> str:
    """A pretend completion call to one provider."""
    await trio.sleep(0.2)
    if endpoint.id == "primary" and trio.current_time() - started < RATE_LIMITED_UNTIL:
        raise ProviderError(endpoint.id, Response(429, {"Retry-After": "60"}))
    if endpoint.id == "secondary":
        raise ProviderError(endpoint.id, Response(401))
    return f"{endpoint.id} completed {prompt!r}"


async def main() -> None:
    providers = [
        poise.Endpoint("primary", tier=0, address="https://api.primary.example"),
        poise.Endpoint("secondary", tier=1, address="https://api.secondary.example"),
        poise.Endpoint("fallback", tier=2, address="https://api.fallback.example"),
    ]
    lb = poise.LoadBalancer(
        poise.StaticDiscovery(providers),
        policy=poise.RoundRobin(),
        classifier=poise.classify.http(),
        # 60 s open windows, doubling per failed probe up to 5 minutes (seed 001's backoff).
        circuit=poise.CircuitPolicy(
            escalation=poise.Escalation(base=60.0, maximum=300.0, jitter=0.0), max_ejection_percent=1.0
        ),
        seed=1,
    )
    started = trio.current_time()
    async with lb:
        for phase, until in (("rate-limited", 55.0), ("recovered", 130.0)):
            served: Counter[str] = Counter()
            while trio.current_time() - started < until:
                answer = await lb.call(complete, "hello", attempts=3, started=started)
                served[answer.split()[0]] += 1
                await trio.sleep(0.8)
            print(f"{phase:<13} served by: {dict(sorted(served.items()))}")
        snapshot = lb.snapshot()
        for e in snapshot.endpoints:
            c = e.counters
            f = c.faults
            print(
                f"{e.id:<10} tier={e.endpoint.tier} {e.state.value:<8} successes={c.successes:<3}"
                f" rate_limited={f[poise.Fault.TRANSIENT]:<2} auth_failures={f[poise.Fault.PERMANENT]}"
                f" probes={c.probes}"
            )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="log: %(levelname)s %(message)s")
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
