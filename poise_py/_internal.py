"""The interface poise_py's own integrations (contrib, sim) use; not public, no stability promise.

A :class:`~poise_py.LoadBalancer` builds one and exposes it as ``lb._internals``: the
one private attribute that code outside ``_balancer.py`` may touch. Everything else the
integrations need comes from the public API (``acquire``, ``snapshot()``,
``statistics()``, ``add_observer``...). What lives here is what no user should call but
every retrying or simulating integration needs, so each does it the way ``lb.call`` does:

- the balancer clock's reading (:meth:`now`);
- the balancer's classification of an exception for an endpoint (:meth:`classify`:
  a raising or ill-typed classifier is logged and read as SUSPECT);
- the one retry driver, :meth:`attempts`: the attempts of one logical request, each an
  async context manager around its permit, decided by a pure
  :class:`~poise_py._core._retry.RetryLoop` on the balancer's shared retry budget (its
  denials are what ``lb.retries_denied`` counts); ``lb.call``, the httpx transport and
  the gRPC channel are each a few lines over it. :meth:`retry_loop` hands the pure loop
  itself to the simulator, which drives it from its own event loop;
- :meth:`run_timers`, for the simulator, which drives virtual time from a synchronous
  loop with no timer task between its events.

The module also carries, as plain names, the few helpers the integrations share with the
balancer so their errors read alike: the knob checks (``check_count``, ``check_number``,
``check_duration``, ``is_number``, ``check_attempts``), the classifier's refusal text
(``classifier_problem``), the optional-extra errors (``missing_extra``, ``require``), the
bound on echoed text (``shown``, ``SHOWN_TEXT``), the pure retry loop (``RetryLoop``,
``AfterFault``) and hedging state (``HedgeState``, from :meth:`BalancerInternals.hedging`) the
simulator drives, and the hedged-request runner (``hedged``) the transport and the
channel share with ``lb.call``. contrib and the simulator import only public modules and
this one (``tests/shell/test_internals.py`` holds them to it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Hashable
from typing import TYPE_CHECKING, Any

from ._attempts import Attempts, Classify, Pacing
from ._call import hedged
from ._core._budget import Budget
from ._core._pool import Pool
from ._core._retry import AfterFault, RetryLoop, check_attempts
from ._core._tails import Hedge, HedgeState, RetryBackoff
from ._default_classifier import Classifier, classifier_problem
from ._errors import ConfigError
from ._extras import install_hint, missing_extra, require
from ._faults import Classification, Fault
from ._knobs import RESOLUTION, check_count, check_duration, check_number, is_number
from ._logs import SHOWN_TEXT, LimitedLog
from ._redact import shown
from ._timer import Timer

if TYPE_CHECKING:
    from ._permit import Permit

__all__ = [
    "RESOLUTION",
    "SHOWN_TEXT",
    "AfterFault",
    "BalancerInternals",
    "HedgeState",
    "RetryLoop",
    "check_attempts",
    "check_count",
    "check_duration",
    "check_number",
    "classifier_problem",
    "hedged",
    "install_hint",
    "is_number",
    "missing_extra",
    "require",
    "shown",
]


class BalancerInternals:
    """What contrib and the simulator may use of one balancer beyond its public API.

    Args:
        clock: reads the balancer's clock (the backend's, or the injected one).
        budget: the balancer's retry budget state, shared by every retrying caller.
        classifier: the balancer's ``classifier=``.
        log: the balancer's rate-limited log (a broken classifier is reported there).
        pool: the balancer's pool (its size).
        timer: the balancer's one timer (:meth:`run_timers` fires it).
        acquire: the balancer's ``acquire(key=..., exclude=..., wait=...)``.
        random: the balancer's seeded uniform draw (the backoff's jitter).
    """

    __slots__ = (
        "_acquire",
        "_budget",
        "_classifier",
        "_clock",
        "_hedge_totals",
        "_hedges",
        "_log",
        "_pool",
        "_random",
        "_timer",
    )

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        budget: Budget,
        classifier: Classifier,
        log: LimitedLog,
        pool: Pool,
        timer: Timer,
        acquire: Callable[..., Any],
        random: Callable[[], float],
    ) -> None:
        self._acquire = acquire
        self._random = random
        self._hedges: dict[tuple[Hedge, Hashable], HedgeState] = {}
        self._hedge_totals = [0, 0, 0]
        """Hedged requests, hedges sent, hedges won, over every call site ever kept."""
        self._clock = clock
        self._budget = budget
        self._classifier = classifier
        self._log = log
        self._pool = pool
        self._timer = timer

    def now(self) -> float:
        """The balancer clock's reading."""
        return self._clock()

    def classify(self, exc: Exception, endpoint_id: str | None = None) -> Classification:
        """``exc`` through the balancer's classifier, as a :class:`Classification`.

        A classifier that raises, or returns something other than a Fault or a
        Classification, is logged (rate-limited, per endpoint) and read as SUSPECT.
        """
        try:
            verdict: object = self._classifier(exc)
        except Exception as error:  # noqa: BLE001 - a broken classifier must not lose the outcome
            self._log.log(
                logging.ERROR,
                (endpoint_id, "classifier"),
                self._clock(),
                "poise_py: the classifier raised on a result of endpoint %r; recording SUSPECT",
                endpoint_id,
                exc_info=error,
            )
            return _SUSPECT
        if isinstance(verdict, Fault):
            return _VERDICTS[verdict]
        if isinstance(verdict, Classification):
            return verdict
        self._log.log(
            logging.ERROR,
            (endpoint_id, "classifier"),
            self._clock(),
            "poise_py: the classifier returned %r for endpoint %r, not a Fault; recording SUSPECT",
            verdict,
            endpoint_id,
        )
        return _SUSPECT

    def attempts(
        self,
        attempts: int,
        *,
        key: Hashable | None = None,
        acquire: Callable[[Collection[str]], Permit] | None = None,
        classify: Classify | None = None,
        timeout: float | None = None,
        discard: Callable[[Any], Awaitable[None]] | None = None,
        wait: float | None = None,
        backoff: RetryBackoff | None = None,
    ) -> Attempts:
        """The attempts of one logical request: ``async for attempt in internals.attempts(3): ...``.

        Args:
            attempts: at most this many tries, each on an endpoint not yet tried.
            key: the routing key of each ``acquire`` (ignored with ``acquire``).
            acquire: takes a permit avoiding the ids given (default the balancer's
                ``acquire(key=key, exclude=...)``).
            classify: judges an attempt's exception (default the balancer's classifier,
                as :meth:`classify`).
            timeout: seconds the request may take, all attempts together, on the
                balancer's clock; ``time_left()`` gives each attempt what is left.
            discard: releases a failed result kept as the answer once another attempt
                starts (an HTTP response to close).
            wait: seconds the first attempt waits for an eligible endpoint (with the
                balancer's ``acquire`` only: a ConfigError with ``acquire``).
            backoff: the delay before each retry (:class:`~poise_py.RetryBackoff`), or None.
        """
        pacing = None if wait is None and backoff is None else self._pacing(key, wait, backoff, own=acquire is None)
        if acquire is None:
            lb_acquire = self._acquire

            def acquire(exclude: Collection[str]) -> Permit:
                permit: Permit = lb_acquire(key=key, exclude=exclude)
                return permit

        now = self._clock
        return Attempts(
            self.retry_loop(attempts),
            acquire=acquire,
            classify=self.classify if classify is None else classify,
            now=now,
            pool_size=self._pool_size,
            deadline=None if timeout is None else now() + timeout,
            discard=discard,
            pacing=pacing,
        )

    def _pacing(self, key: Hashable | None, wait: float | None, backoff: RetryBackoff | None, *, own: bool) -> Pacing:
        """A request's wait and backoff, checked (``own``: the balancer's ``acquire``, the only one that waits)."""
        if backoff is not None and not isinstance(backoff, RetryBackoff):
            raise ConfigError("backoff", f"must be a poise.RetryBackoff(...) or None, got {backoff!r:.80}")
        wait_acquire: Callable[[Collection[str]], Awaitable[Permit]] | None = None
        if wait is not None:
            check_duration("wait", wait, allow_zero=True)
            if not own:
                raise ConfigError("wait", "waits only with the balancer's own acquire (no acquire= given)")
            lb_acquire = self._acquire

            async def wait_acquire(exclude: Collection[str]) -> Permit:
                permit: Permit = await lb_acquire(key=key, exclude=exclude, wait=wait).permit()
                return permit

        return Pacing(wait_acquire, backoff, self._random)

    def hedging(self, hedge: Hedge, scope: Hashable = None) -> HedgeState:
        """The hedging state (measured latency, extra-load allowance) of ``hedge`` at call site ``scope``.

        One per (hedge, scope) for the balancer's life, at most :data:`HEDGE_SCOPES`
        (the oldest is forgotten past that).
        """
        if not isinstance(hedge, Hedge):
            raise ConfigError("hedge", f"must be a poise.Hedge(...) or None, got {hedge!r:.80}")
        states = self._hedges
        state = states.get((hedge, scope))
        if state is None:
            if len(states) >= HEDGE_SCOPES:
                states.pop(next(iter(states)))
            state = states[hedge, scope] = HedgeState(hedge, self._hedge_totals)
        return state

    def hedge_totals(self) -> tuple[int, int, int]:
        """(requests hedging was on for, hedges sent, hedges that won), over every call site since the start."""
        requests, sent, won = self._hedge_totals
        return requests, sent, won

    def _pool_size(self) -> int:
        return len(self._pool.members)

    def retry_loop(self, attempts: int) -> RetryLoop:
        """A retry loop for one logical request on the balancer's budget (not started yet).

        The caller calls ``start(now)`` as the request begins and ``after_fault`` after
        each failed attempt; a refused retry is counted in ``lb.retries_denied``.
        """
        return RetryLoop(self._budget, attempts)

    @property
    def retries_denied(self) -> int:
        """Retries the budget refused so far (``lb.retries_denied``)."""
        return self._budget.denied

    @property
    def pool_size(self) -> int:
        """How many endpoints the pool holds now (``after_fault(pool_size=...)``)."""
        return len(self._pool.members)

    def run_timers(self, now: float) -> None:
        """Fire every timer due at ``now``: the balancer's one timer, the same step its task takes.

        For the simulator: it drives virtual time from a synchronous loop, so no timer
        task runs between its events; it fires them where it samples the pool.
        """
        self._timer.fire(now)


HEDGE_SCOPES = 256
"""The most call sites whose hedging state one balancer keeps."""

_VERDICTS: dict[Fault, Classification] = {fault: Classification(fault) for fault in Fault}
"""A bare fault's classification (built once: a classified failure allocates nothing)."""
_SUSPECT = _VERDICTS[Fault.SUSPECT]
