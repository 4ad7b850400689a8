"""Faults: what an outcome says about an endpoint's health."""

from __future__ import annotations

import enum
import math

import attrs

from ._errors import ConfigError
from ._knobs import as_float, is_number, knob_repr


class Fault(enum.Enum):
    """The health meaning of a failed call.

    The tiers keep an ambiguous error from costing a live endpoint: only SUSPECT counts
    toward ejection, only FATAL ejects at once, and CALLER says nothing about the endpoint.
    """

    TRANSIENT = "transient"
    """Skip this endpoint for this call; no strike (overload, unavailable, deadline)."""
    SUSPECT = "suspect"
    """A strike: the endpoint is ejected only when strikes cross the trip conditions."""
    FATAL = "fatal"
    """Eject now (a server's deliberate evict-me signal); recoverable through half-open."""
    PERMANENT = "permanent"
    """Block, never probe, until discovery or an operator changes it (401/403)."""
    CALLER = "caller"
    """The caller's own fault (bad request, encoding error): no effect on health."""


@attrs.frozen
class Classification:
    """A classifier's answer when a bare :class:`Fault` is not enough.

    Attributes:
        fault: the tier.
        retry_after: seconds the server asked us to stay away (HTTP Retry-After); the
            circuit opens for at least that long.
        overload: the failure is load-shaped: a timeout, HTTP 503 or 504, gRPC
            DEADLINE_EXCEEDED (the presets set it; a 429 is a quota, not load). While another
            endpoint of the pool had such a failure within
            ``CircuitPolicy.overload_window``, it is the pool's load, not this
            endpoint's fault: counted, fed to adaptive limits, never a strike
            (docs/overload.md, overload is not a fault).
    """

    fault: Fault
    retry_after: float | None = attrs.field(default=None, kw_only=True)
    overload: bool = attrs.field(default=False, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.fault, Fault):
            raise ConfigError("fault", f"must be a poise.Fault such as Fault.TRANSIENT, got {self.fault!r:.80}")
        check_retry_after(self.retry_after)
        if not isinstance(self.overload, bool):
            raise ConfigError("overload", f"must be a bool, got {self.overload!r:.80}")


def check_retry_after(value: float | None) -> None:
    """Raise :class:`ConfigError` unless ``value`` is None or a finite number >= 0."""
    if value is None:
        return
    if not is_number(value) or not math.isfinite(as_float(value)) or value < 0:
        raise ConfigError("retry_after", f"must be a finite number of seconds >= 0, got {knob_repr(value):.80}")
