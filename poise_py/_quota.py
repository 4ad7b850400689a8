"""A provider's remaining quota, read from the rate-limit headers it sends on every answer.

LLM providers (and many other APIs) say on each response how much of their rate limit is
left and when it resets. :func:`quota_from_headers` reads the families in use:

- OpenAI: ``x-ratelimit-{limit,remaining}-{requests,tokens}`` (counts) and
  ``x-ratelimit-reset-{requests,tokens}`` (a duration: ``1s``, ``6m0s``, ``20ms``, ``1h2m3.5s``;
  a plain number is read as seconds);
- Anthropic: ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}``
  (the reset an RFC 3339 time, turned into seconds from ``wall``); of the token families the
  one with the least left is the ``tokens`` quota;
- the IETF RateLimit draft: ``RateLimit-Limit`` / ``RateLimit-Remaining`` / ``RateLimit-Reset``
  (seconds), the structured ``RateLimit: limit=100, remaining=50, reset=30`` of draft 07, and
  ``RateLimit: "name";r=50;t=30`` with ``RateLimit-Policy: "name";q=100;w=60`` of later drafts,
  all read as the ``requests`` quota when no provider header gives it;
- ``retry-after-ms`` (milliseconds) and ``Retry-After`` (seconds or an HTTP date): the
  ``retry_after``, and the reset of an exhausted quota whose own reset is not given.

The reader never raises: a header it cannot read is skipped, and no readable header is None.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TypeVar

import attrs

from ._errors import ConfigError
from ._knobs import as_float, is_number, knob_repr
from ._load_report import _pairs, _text

MAX_QUOTA_VALUE = 256
"""The longest rate-limit header value read, in characters; a longer one is skipped."""
T = TypeVar("T")


def _count(knob: str, value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(knob, f"must be an int >= 0 or None, got {knob_repr(value):.80}")
    return value


def _seconds(knob: str, value: object) -> float | None:
    if value is None:
        return None
    if not is_number(value) or not math.isfinite(as_float(value)) or value < 0:
        raise ConfigError(knob, f"must be a finite number of seconds >= 0 or None, got {knob_repr(value):.80}")
    return float(value) + 0.0


@attrs.frozen(kw_only=True)
class Quota:
    """How much of a provider's rate limit is left, as its last answer said. None: not said.

    Reset times are seconds from when the headers were read (``wall``), not timestamps.

    Attributes:
        requests_limit: requests allowed in the provider's window.
        requests_remaining: requests left in it.
        requests_reset: seconds until the request limit is whole again.
        tokens_limit: tokens allowed in the window.
        tokens_remaining: tokens left in it.
        tokens_reset: seconds until the token limit is whole again.
        retry_after: seconds the provider asked the caller to wait (``retry-after-ms`` or
            ``Retry-After``).
    """

    requests_limit: int | None = None
    requests_remaining: int | None = None
    requests_reset: float | None = None
    tokens_limit: int | None = None
    tokens_remaining: int | None = None
    tokens_reset: float | None = None
    retry_after: float | None = None

    def __attrs_post_init__(self) -> None:
        # Checked here, naming the field: counts are ints >= 0, times finite seconds >= 0.
        for field in attrs.fields(Quota):
            value = getattr(self, field.name)
            knob = f"Quota.{field.name}"
            counted = field.name.endswith(("_limit", "_remaining"))
            checked = _count(knob, value) if counted else _seconds(knob, value)
            object.__setattr__(self, field.name, checked)

    @property
    def remaining_fraction(self) -> float | None:
        """The tightest share left (0.0 to 1.0) of the limits whose size is known, or None.

        A quota with nothing left is 0.0 even when its limit is not given.
        """
        shares: list[float] = []
        for limit, remaining in (
            (self.requests_limit, self.requests_remaining),
            (self.tokens_limit, self.tokens_remaining),
        ):
            if remaining == 0:
                shares.append(0.0)
            elif remaining is not None and limit:
                shares.append(min(1.0, remaining / limit))
        return min(shares) if shares else None

    @property
    def exhausted(self) -> bool:
        """True if the requests or the tokens left are 0: another call now would be refused."""
        return self.requests_remaining == 0 or self.tokens_remaining == 0

    @property
    def resets_in(self) -> float | None:
        """Seconds until every exhausted limit is whole again, or None (nothing exhausted, or no time given).

        An exhausted limit without its own reset time resets after ``retry_after``.
        """
        waits = [
            self.retry_after if reset is None else reset
            for remaining, reset in (
                (self.requests_remaining, self.requests_reset),
                (self.tokens_remaining, self.tokens_reset),
            )
            if remaining == 0
        ]
        known = [wait for wait in waits if wait is not None]
        return max(known) if known else None


def quota_from_headers(headers: object, *, wall: float | None = None) -> Quota | None:
    """The quota an HTTP response's rate-limit headers state, or None when they state none.

    ``headers`` is a mapping (``httpx.Headers``, a dict) or a list of ``(name, value)`` pairs,
    names in any case. ``wall`` is the current Unix time, for reset times given as dates
    (default ``time.time()``). Never raises: a header it cannot read is skipped.
    """
    try:
        found = _collect(headers)
        if not found:  # most answers: no rate-limit header, nothing to parse
            return None
        return _quota(found, time.time() if wall is None else float(wall))
    except Exception:  # noqa: BLE001 - the reader never raises: anything unreadable is no quota
        return None


_FAMILIES = ("requests", "tokens", "input-tokens", "output-tokens")


def _collect(headers: object) -> dict[str, str]:
    """The rate-limit headers, lower-cased names, the first of each, short values only."""
    found: dict[str, str] = {}
    for name, value in _pairs(headers):
        key = _text(name).lower()
        if key in _WANTED and key not in found:
            text = _text(value)
            if len(text) <= MAX_QUOTA_VALUE:
                found[key] = text.strip()
    return found


def _wanted() -> frozenset[str]:
    names = {"retry-after", "retry-after-ms", "ratelimit", "ratelimit-policy"}
    names |= {f"ratelimit-{part}" for part in ("limit", "remaining", "reset")}
    for family in ("requests", "tokens"):
        names |= {f"x-ratelimit-{part}-{family}" for part in ("limit", "remaining", "reset")}
    for family in _FAMILIES:
        names |= {f"anthropic-ratelimit-{family}-{part}" for part in ("limit", "remaining", "reset")}
    return frozenset(names)


_WANTED = _wanted()


def _quota(found: dict[str, str], wall: float) -> Quota | None:
    retry_after = _first(
        retry_after_ms(found.get("retry-after-ms")), retry_after_seconds(found.get("retry-after"), wall)
    )
    openai = {family: _openai(found, family) for family in ("requests", "tokens")}
    anthropic = [_anthropic(found, family, wall) for family in _FAMILIES]
    ietf = _ietf(found)
    requests = _merge(openai["requests"], anthropic[0], ietf)
    tokens = _merge(openai["tokens"], _tightest([a for a in anthropic[1:] if a != _NONE]))
    quota = Quota(
        requests_limit=requests[0],
        requests_remaining=requests[1],
        requests_reset=requests[2],
        tokens_limit=tokens[0],
        tokens_remaining=tokens[1],
        tokens_reset=tokens[2],
        retry_after=retry_after,
    )
    return None if quota == Quota() else quota


Triple = tuple[int | None, int | None, float | None]
"""(limit, remaining, seconds to reset) of one limit."""
_NONE: Triple = (None, None, None)


def _first(*values: T | None) -> T | None:
    return next((v for v in values if v is not None), None)


def _merge(*triples: Triple) -> Triple:
    """Each part from the first source that gives it (provider headers before the IETF ones)."""
    return (
        _first(*(t[0] for t in triples)),
        _first(*(t[1] for t in triples)),
        _first(*(t[2] for t in triples)),
    )


def _tightest(triples: list[Triple]) -> Triple:
    """The limit with the least share left (of those that say what is left), else the first."""
    told = [t for t in triples if t[1] is not None]
    if not told:
        return triples[0] if triples else _NONE

    def share(t: Triple) -> float:
        limit, remaining = t[0], t[1]
        assert remaining is not None  # noqa: S101 - filtered above
        return remaining / limit if limit else float(remaining)

    return min(told, key=share)


def _openai(found: dict[str, str], family: str) -> Triple:
    return (
        _integer(found.get(f"x-ratelimit-limit-{family}")),
        _integer(found.get(f"x-ratelimit-remaining-{family}")),
        _duration(found.get(f"x-ratelimit-reset-{family}")),
    )


def _anthropic(found: dict[str, str], family: str, wall: float) -> Triple:
    return (
        _integer(found.get(f"anthropic-ratelimit-{family}-limit")),
        _integer(found.get(f"anthropic-ratelimit-{family}-remaining")),
        _timestamp(found.get(f"anthropic-ratelimit-{family}-reset"), wall),
    )


def _ietf(found: dict[str, str]) -> Triple:
    separate: Triple = (
        _integer(_first_item(found.get("ratelimit-limit"))),
        _integer(found.get("ratelimit-remaining")),
        _plain_seconds(found.get("ratelimit-reset")),
    )
    structured = found.get("ratelimit")
    if structured is None:
        return separate
    members: dict[str, str] = {}
    named: list[tuple[str, dict[str, str]]] = []
    for name, params in _items(structured):
        if name is None:
            members.update(params)
        else:
            named.append((name, params))
    if members:
        fields: Triple = (
            _integer(members.get("limit")),
            _integer(members.get("remaining")),
            _plain_seconds(members.get("reset")),
        )
    elif named:  # one item per policy: the tightest is the quota (a spent one spends it)
        policies = dict(_items(found.get("ratelimit-policy", "")))
        default = next(iter(policies.values()), {})
        fields = _tightest(
            [
                (
                    _integer(policies.get(name, default).get("q")),
                    _integer(params.get("r")),
                    _plain_seconds(params.get("t")),
                )
                for name, params in named
            ]
        )
    else:
        fields = _NONE
    return _merge(fields, separate)


def _items(text: str) -> Iterator[tuple[str | None, dict[str, str]]]:
    """A structured-field list, loosely: each item's name (None for a bare ``key=value``) and parameters."""
    for item in text.split(","):
        pieces = [piece.strip() for piece in item.split(";")]
        if not pieces[0]:
            continue
        params: dict[str, str] = {}
        head = pieces[0]
        name: str | None = head.strip('"')
        if "=" in head:
            key, _, value = head.partition("=")
            params[key.strip().lower()] = value.strip()
            name = None
        for piece in pieces[1:]:
            key, eq, value = piece.partition("=")
            if eq:
                params[key.strip().lower()] = value.strip()
        yield name, params


def _first_item(text: str | None) -> str | None:
    """``"100"`` of ``"100, 100;w=60"`` (the limit, then the policies of draft 05's ``RateLimit-Limit``)."""
    return None if text is None else text.split(",")[0].split(";")[0]


_INTEGER = re.compile(r"\d{1,18}")
_DECIMAL = re.compile(r"(?:\d{1,15}(?:\.\d{0,9})?|\.\d{1,9})")
_GO_PART = re.compile(r"(\d{1,15}(?:\.\d{0,9})?|\.\d{1,9})(h|ms|m|s|us|µs|μs|ns)")
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9}


def _integer(text: str | None) -> int | None:
    if text is None or _INTEGER.fullmatch(text.strip()) is None:
        return None
    return int(text)


def _plain_seconds(text: str | None) -> float | None:
    if text is None or _DECIMAL.fullmatch(text.strip()) is None:
        return None
    return float(text)


def retry_after_ms(text: str | None) -> float | None:
    """Seconds from a ``retry-after-ms`` value (a plain decimal number of milliseconds), or None.

    The one reader of the header, for the quota and for :func:`poise_py.classify.http_status`:
    a sign, an exponent, a non-finite or an over-long number is not a delay.
    """
    seconds = _plain_seconds(text)
    return None if seconds is None else seconds / 1000.0


def _duration(text: str | None) -> float | None:
    """A Go duration (``6m0s``, ``20ms``, ``1h2m3.5s``), or a plain number of seconds."""
    if text is None:
        return None
    text = text.strip()
    plain = _plain_seconds(text)
    if plain is not None:
        return plain
    total, pos = 0.0, 0
    while pos < len(text):
        match = _GO_PART.match(text, pos)
        if match is None:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return total if pos else None


def _timestamp(text: str | None, wall: float) -> float | None:
    """Seconds from ``wall`` to an RFC 3339 time (0 if it has passed); a zone-less time is UTC."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return _until(moment, wall)


def retry_after_seconds(text: str | None, now: datetime | float, *, lenient: bool = False) -> float | None:
    """``Retry-After``: delay seconds, or an HTTP date (seconds from ``now``, 0 if passed); None if neither.

    The one reader of the header, for the quota and for :func:`poise_py.classify.parse_retry_after`.
    ``now`` is an aware datetime or a Unix time. Delay seconds are a plain decimal number;
    ``lenient`` takes any finite number ``float()`` reads instead (``"1e3"``; a negative one
    is 0), as ``parse_retry_after`` always has.
    """
    if text is None:
        return None
    text = text.strip()
    seconds = _finite(text) if lenient else _plain_seconds(text)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return _until(moment, now)


def _finite(text: str) -> float | None:
    """Any finite number ``float()`` reads from ``text`` (a sign, an exponent), or None."""
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _until(moment: datetime, now: datetime | float) -> float:
    """Seconds from ``now`` (a datetime or a Unix time) to ``moment``, 0 if passed; a zone-less moment is UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = (moment - now).total_seconds() if isinstance(now, datetime) else moment.timestamp() - now
    return max(0.0, seconds)
