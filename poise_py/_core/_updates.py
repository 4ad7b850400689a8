"""Discovery updates: the values every source yields and the core applies (pure: no anyio)."""

from __future__ import annotations

import enum
from collections.abc import Iterable

import attrs

from .._endpoint import Endpoint
from .._errors import ConfigError


class DiscoveryEnd(enum.Enum):
    """What the balancer does when its discovery stream ends or fails."""

    LAST_KNOWN_GOOD = "last_known_good"
    """Keep serving the last applied pool."""
    FAIL_CLOSED = "fail_closed"
    """Empty the pool; ``acquire`` raises ``DiscoveryClosed``."""


def _endpoint_tuple(knob: str, value: object) -> tuple[Endpoint, ...]:
    if isinstance(value, Endpoint):
        raise ConfigError(knob, f"must be a collection of Endpoint values, got one Endpoint: write [{value!r:.80}]")
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigError(knob, f"must be a collection of Endpoint values (a list, a tuple...), got {value!r:.80}")
    items = tuple(value)
    for e in items:
        if not isinstance(e, Endpoint):
            raise ConfigError(knob, f"must hold Endpoint values, got {e!r:.80}")
    return items


def _endpoints(value: Iterable[Endpoint]) -> tuple[Endpoint, ...]:
    return _endpoint_tuple("endpoints", value)


def _added(value: Iterable[Endpoint]) -> tuple[Endpoint, ...]:
    return _endpoint_tuple("added", value)


def _updated(value: Iterable[Endpoint]) -> tuple[Endpoint, ...]:
    return _endpoint_tuple("updated", value)


def _id_tuple(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigError("removed", f"must be an iterable of endpoint ids (strings), got {value!r}")
    ids = tuple(value)
    for i in ids:
        if not isinstance(i, str):
            raise ConfigError("removed", f"must hold endpoint ids (strings), got {i!r}")
    return ids


@attrs.frozen
class Snapshot:
    """The whole pool as of ``revision``."""

    revision: int
    endpoints: tuple[Endpoint, ...] = attrs.field(converter=_endpoints)


@attrs.frozen(kw_only=True)
class Delta:
    """A change to the pool as of ``revision``: ids added, removed and updated."""

    revision: int = attrs.field(kw_only=False)
    added: tuple[Endpoint, ...] = attrs.field(default=(), converter=_added)
    removed: tuple[str, ...] = attrs.field(default=(), converter=_id_tuple)
    updated: tuple[Endpoint, ...] = attrs.field(default=(), converter=_updated)


Update = Snapshot | Delta
