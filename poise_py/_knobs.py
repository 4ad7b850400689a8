"""Knob validation: one check per kind of knob, each raising ``ConfigError(knob, message)``.

Pure (imports nothing async), so the core (``poise_py._core``) and the shell use the same
checks: a duration in seconds, a share written as a fraction, a number in a range, an
integer count, a bool, and :func:`optional` for any of them that may be None. The
messages are the same wherever a knob of the kind appears.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeGuard, TypeVar

from ._errors import ConfigError

T = TypeVar("T")


def is_number(value: object) -> TypeGuard[int | float]:
    """An int or a float, and not a bool (``True`` is an int to Python, never a number to a knob)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def knob_repr(value: object) -> str:
    """``repr(value)`` for an error message.

    An int too long for ``repr`` (past Python's 4,300 digits, which raises ``ValueError``) is
    described instead.
    """
    try:
        return repr(value)
    except ValueError:
        return f"an int of {value.bit_length()} bits" if isinstance(value, int) else object.__repr__(value)


def as_float(value: int | float) -> float:
    """``value`` as a float; an int too large for one reads as infinite, with its sign.

    ``float(10**400)`` raises ``OverflowError``: every check converts through this instead,
    so such a knob gets the ``ConfigError`` an infinite one gets.
    """
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def check_bool(knob: str, value: object) -> bool:
    """A bool, exactly (1 and "yes" are refused)."""
    if not isinstance(value, bool):
        raise ConfigError(knob, f"must be a bool, got {knob_repr(value):.80}")
    return value


RESOLUTION = 1e-3
"""The shortest period a timer is asked to keep (a millisecond): an interval or a window's
slice any shorter is lost in the clock's rounding (``now + 1e-12 == now`` at ``now = 1e5``),
so a periodic task would be due again at the instant it ran, for ever."""


def check_duration(knob: str, value: float, *, allow_zero: bool = False, minimum: float = 0.0) -> float:
    """A finite number of seconds, > 0 (or >= 0 with ``allow_zero``), and >= ``minimum`` if given.

    Give ``minimum=RESOLUTION`` to a period the timer repeats.
    """
    if not is_number(value):
        raise ConfigError(knob, f"must be a number of seconds, got {knob_repr(value):.80}")
    v = as_float(value)
    if math.isnan(v) or math.isinf(v):
        raise ConfigError(knob, f"must be finite, got {knob_repr(value):.80}")
    if v < 0 or (v == 0 and not allow_zero):
        raise ConfigError(knob, f"must be {'>= 0' if allow_zero else '> 0'}, got {knob_repr(value):.80}")
    if v < minimum:
        raise ConfigError(
            knob, f"must be at least {minimum:g} s (a period the timer repeats), got {knob_repr(value):.80}"
        )
    return v


def check_share(
    knob: str,
    value: float,
    *,
    high: float = 1.0,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """A share written as a *fraction* (0.5 means half), in ``[0, high]`` (ends open as asked).

    Every share knob takes a fraction (``docs/knobs.md`` lists them). A value that reads
    as a percent (past ``high``, up to ``100 * high``) gets an error saying so and giving
    the fraction to write instead.
    """
    low_mark, high_mark = "(" if low_open else "[", ")" if high_open else "]"
    span = f"{low_mark}0, {high:g}{high_mark}"
    if not is_number(value) or math.isnan(v := as_float(value)):
        raise ConfigError(knob, f"must be a fraction in {span} (0.5 = 50%), got {knob_repr(value):.80}")
    if v < 0 or (low_open and v == 0) or v > high or (high_open and v == high):
        hint = ""
        if high < v <= 100 * high:
            hint = f": {value!r} looks like a percent; shares are fractions, so write {v / 100:g}"
        raise ConfigError(knob, f"must be a fraction in {span} (0.5 = 50%), got {knob_repr(value):.80}{hint}")
    return v


def check_number(
    knob: str,
    value: float,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """A number (not NaN, and finite when ``high`` is infinite) in the range, ends open as asked."""
    if not is_number(value) or math.isnan(v := as_float(value)):
        raise ConfigError(knob, f"must be a number, got {knob_repr(value):.80}")
    if math.isinf(high):
        if not (v < math.inf and (v > low if low_open else v >= low)):
            raise ConfigError(
                knob, f"must be a finite number {'>' if low_open else '>='} {low:g}, got {knob_repr(value):.80}"
            )
    elif v < low or v > high or (low_open and v == low) or (high_open and v == high):
        span = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ConfigError(knob, f"must be in {span}, got {knob_repr(value):.80}")
    return v


MAX_COUNT = 2**32 - 1
"""The largest count a knob takes unless it says otherwise: where a consecutive run saturates,
so a threshold above it could never be reached (and an int past a C size no buffer takes)."""


def check_count(knob: str, value: int, *, minimum: int = 1, maximum: int | None = MAX_COUNT, why: str = "") -> int:
    """An int (not a bool) in ``[minimum, maximum]`` (None: no maximum); ``why`` explains the bound."""
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        # The default bound is named only to a value past it: below, the message is as it always was.
        past = maximum is not None and isinstance(value, int) and not isinstance(value, bool) and value > maximum
        span = (
            f">= {minimum}"
            if maximum is None or (maximum == MAX_COUNT and not past)
            else f"in [{minimum}, {_power(maximum)}]"
        )
        raise ConfigError(knob, f"must be an int {span}{f' ({why})' if why else ''}, got {knob_repr(value):.80}")
    return value


def _power(n: int) -> str:
    """``n`` as written in the docs: a large power of two as ``2**k``, one less as ``2**k - 1``."""
    if n >= 1 << 16 and n & (n - 1) == 0:
        return f"2**{n.bit_length() - 1}"
    if n >= 1 << 16 and n & (n + 1) == 0:
        return f"2**{n.bit_length()} - 1"
    return str(n)


def optional(check: Callable[..., T], knob: str, value: Any, **bounds: Any) -> T | None:
    """``check(knob, value, **bounds)``, or None when ``value`` is None (a knob that may be unset)."""
    if value is None:
        return None
    return check(knob, value, **bounds)
