"""The quick run: every scenario shortened to about the same number of requests.

``poise simulate`` runs the quick version of each scenario unless ``--full`` is given; a
scenario already at most :data:`QUICK_REQUESTS` requests per configuration runs whole.
A longer one is shortened by the factor ``k = requests / QUICK_REQUESTS``, in the one way
that keeps what it measures:

* without capacities (the fault scenarios), the endpoints do not queue, so the request
  rate only sets how often the same faults are sampled: the traffic is *thinned* to
  ``rps / k`` on the unchanged timeline, so every fault window, open window and backoff
  keeps its length; the timeline is sampled every ``k`` sample intervals, so a sample
  holds as many requests as before (and a fleet's fifty balancers are read ``k`` times
  less often);
* with capacities (the load scenarios), queues depend on the rate, so the rate stays and
  the *timeline is compressed*: the duration and every time the scenario schedules (phase
  starts, joining and leaving, flapping cycles, warm-ups, the publisher's death) are
  divided by ``k``; what the client and balancer configure (timeouts, windows, slow start)
  and every rate (quotas, rate limits) stay.

The shortened scenario is a scenario like any other, so a quick run is as deterministic
per seed as a full one; its figures differ from the full run's, which ``--full`` gives.
"""

from __future__ import annotations

import attrs

from ._models import EndpointModel
from ._scenario import Scenario

QUICK_REQUESTS = 8_000
"""The requests per configuration a quick run simulates at most: every built-in scenario then
runs in under 20 s on two cores (docs/simulator.md has the timings)."""


@attrs.frozen(kw_only=True)
class Shortening:
    """How a quick run shortened a scenario (``factor`` 1: it runs whole).

    Attributes:
        factor: the full run's requests per configuration over the quick run's.
        thinned: True when the traffic was thinned (no capacities), False when the timeline
            was compressed (or nothing changed).
        full_rps: the scenario's own request rate.
        full_duration: the scenario's own duration, virtual seconds.
    """

    factor: float
    thinned: bool
    full_rps: float
    full_duration: float

    @property
    def shortened(self) -> bool:
        """Whether the quick run differs from the full one."""
        return self.factor > 1.0

    def describe(self, scenario: Scenario) -> str:
        """One line for the table's header: what was shortened, and how (``scenario`` is the quick one)."""
        if not self.shortened:
            return "full run"
        traffic = scenario.traffic
        if self.thinned:
            return (
                f"quick run: {traffic.rps:.3g} requests/s instead of {self.full_rps:g} on the same "
                f"{traffic.duration:.0f} s timeline (--full for the full run)"
            )
        return (
            f"quick run: the timeline compressed {self.factor:.2g}x to {traffic.duration:.0f} s of "
            f"{self.full_duration:.0f} s at the same {traffic.rps:g} requests/s (--full for the full run)"
        )


def quick(scenario: Scenario, *, requests: int | None = None) -> tuple[Scenario, Shortening]:
    """The quick version of ``scenario`` (itself when it is short enough), and how it was shortened.

    ``requests`` is the most requests per configuration (default :data:`QUICK_REQUESTS`).
    """
    cap = QUICK_REQUESTS if requests is None else requests
    traffic = scenario.traffic
    factor = max(1.0, traffic.rps * traffic.duration / cap)
    loaded = scenario.loaded
    shortening = Shortening(
        factor=factor, thinned=not loaded and factor > 1.0, full_rps=traffic.rps, full_duration=traffic.duration
    )
    if factor == 1.0:
        return scenario, shortening
    if not loaded:
        thinned = attrs.evolve(traffic, rps=traffic.rps / factor, sample_interval=traffic.sample_interval * factor)
        return attrs.evolve(scenario, traffic=thinned), shortening
    return compress(scenario, factor), shortening


def compress(scenario: Scenario, factor: float) -> Scenario:
    """``scenario`` with its timeline divided by ``factor``: the duration and every scheduled time.

    The one list of the times a scenario schedules: a new one in the endpoint models or the
    discovery spec belongs here (``tests/sim/test_simulate_cli.py`` checks the fault windows
    and change points scale).
    """
    discovery = scenario.discovery
    if discovery is not None and discovery.publisher_dies_at is not None:
        discovery = attrs.evolve(discovery, publisher_dies_at=discovery.publisher_dies_at / factor)
    return attrs.evolve(
        scenario,
        traffic=attrs.evolve(scenario.traffic, duration=scenario.traffic.duration / factor),
        endpoints=tuple(_compress_endpoint(model, factor) for model in scenario.endpoints),
        discovery=discovery,
    )


def _compress_endpoint(model: EndpointModel, factor: float) -> EndpointModel:
    flap = model.flap
    if flap is not None:
        flap = attrs.evolve(flap, start=flap.start / factor, period=flap.period / factor, down=flap.down / factor)
    warmup = model.warmup
    if warmup is not None:
        warmup = attrs.evolve(warmup, duration=warmup.duration / factor)
    return attrs.evolve(
        model,
        phases=tuple(attrs.evolve(phase, start=phase.start / factor) for phase in model.phases),
        flap=flap,
        warmup=warmup,
        joins_at=model.joins_at / factor,
        leaves_at=None if model.leaves_at is None else model.leaves_at / factor,
    )
