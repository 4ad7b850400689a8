"""Selection policies: pick one endpoint from the eligible candidates.

A public policy is a frozen configuration; :meth:`bind` gives the stateful picker one
balancer uses, with the balancer's seeded rng injected so every pick is reproducible.
Every pick is O(1).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

import attrs

from ._state import EndpointState


class Picker(Protocol):
    """Picks among candidates; one per balancer, holds the policy's running state."""

    def pick(self, candidates: Sequence[EndpointState], loads: Sequence[int], key: Hashable | None) -> EndpointState:
        """Return one of ``candidates`` (never empty); ``loads[i]`` is ``candidates[i].inflight``."""


class Policy(Protocol):
    """A selection policy's configuration."""

    def bind(self, rng: random.Random) -> Picker:
        """Return a fresh picker using ``rng``."""


@attrs.frozen
class RoundRobin:
    """Cycle through the eligible endpoints in turn."""

    def bind(self, rng: random.Random) -> Picker:
        """Return a round-robin picker (starting at a random offset)."""
        return _RoundRobinPicker(rng.randrange(1 << 30))


class _RoundRobinPicker:
    __slots__ = ("_next",)

    def __init__(self, start: int) -> None:
        self._next = start

    def pick(self, candidates: Sequence[EndpointState], loads: Sequence[int], key: Hashable | None) -> EndpointState:
        i = self._next
        self._next = i + 1 if i < (1 << 62) else 0
        return candidates[i % len(candidates)]


@attrs.frozen
class PowerOfTwoChoices:
    """Pick two endpoints at random and use the one with fewer permits in flight.

    The least-loaded of two random choices gets exponentially better balance than one
    random choice at O(1) cost (Mitzenmacher). Ties go to the first draw.
    """

    def bind(self, rng: random.Random) -> Picker:
        """Return a power-of-two-choices picker."""
        return _P2CPicker(rng.random)


class _P2CPicker:
    __slots__ = ("_random",)

    def __init__(self, unit: Callable[[], float]) -> None:
        self._random = unit

    def pick(self, candidates: Sequence[EndpointState], loads: Sequence[int], key: Hashable | None) -> EndpointState:
        n = len(candidates)
        if n == 1:
            return candidates[0]
        rnd = self._random
        i = int(rnd() * n)
        j = int(rnd() * (n - 1))
        if j >= i:
            j += 1
        return candidates[j] if loads[j] < loads[i] else candidates[i]
