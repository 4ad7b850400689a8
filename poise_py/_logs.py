"""Rate-limited logging: a flapping endpoint cannot flood the log (error-handling rule 5).

Each log line has a key (what it is about: an endpoint id and a kind). A token bucket per
key lets ``burst`` lines through, then one line per ``interval / burst`` seconds; the
lines held back are counted and the next line that passes says how many. The number of
keys is bounded (the least recently used is forgotten), so memory stays bounded however
many endpoints come and go.

Every record of the ``poise_py`` logger also passes :class:`ShownText`, whoever writes it:
ids, addresses, storage values and error messages come from outside the process, so each
string or exception a line carries is redacted and bounded (:mod:`poise_py._redact`)
before any handler formats it. A 200 KB endpoint id makes a line of about 600 characters
that ends with ``… (200000 characters)``, and ``https://user:pass@host/?token=...`` is
written ``https://***@host/?token=***``.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Hashable, Mapping

import attrs

from ._knobs import check_count, check_duration
from ._redact import shown, shown_error, shown_value

logger = logging.getLogger("poise_py")


class ShownText(logging.Filter):
    """Redacts and bounds the outside text of a log record: its arguments and its exception.

    A logger's filter may change the record it passes (the stdlib's way to add context);
    this one replaces each string or exception argument by its shown form, the message
    itself when it has no arguments, and the exception of ``exc_info`` (with its chain) by
    a copy whose messages are shown. Numbers and other objects pass as they are.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Show the record's text; never drops a record."""
        args = record.args
        if isinstance(args, Mapping):
            record.args = {k: shown_value(v) for k, v in args.items()}
        elif args:
            record.args = tuple(shown_value(a) for a in args)
        elif isinstance(record.msg, str):
            record.msg = shown(record.msg)
        exc_info = record.exc_info
        if exc_info is not None and exc_info[1] is not None:
            error = shown_error(exc_info[1])
            if error is not exc_info[1]:
                record.exc_info = (type(error), error, exc_info[2])
        return True


SHOWN_TEXT = ShownText()
"""The one filter, on the ``poise_py`` logger (and the status page's server log)."""
logger.addFilter(SHOWN_TEXT)


def _interval(value: float) -> float:
    return check_duration("LogLimit.interval", value)


def _check_burst(instance: LogLimit, attribute: attrs.Attribute[int], value: int) -> None:
    check_count(f"LogLimit.{attribute.name}", value)


@attrs.frozen(kw_only=True)
class LogLimit:
    """How much one endpoint may write to the ``poise_py`` log.

    Attributes:
        burst: lines one key (an endpoint and a kind of message) may write at once.
        interval: seconds over which ``burst`` more lines are allowed again.
        max_keys: how many keys are remembered; the least recently used is forgotten.
    """

    burst: int = attrs.field(default=5, validator=_check_burst)
    interval: float = attrs.field(default=60.0, converter=_interval)
    max_keys: int = attrs.field(default=1024, validator=_check_burst)


@attrs.define
class _Bucket:
    tokens: float
    updated: float
    suppressed: int = 0


class RateLimiter:
    """Token buckets per key; pure (``now`` comes in)."""

    def __init__(self, limit: LogLimit) -> None:
        self.limit: LogLimit = limit
        self._rate = limit.burst / limit.interval
        self._buckets: OrderedDict[Hashable, _Bucket] = OrderedDict()
        self.suppressed: int = 0
        """Lines held back in all, over the limiter's life (saturating is moot for a Python int)."""

    def allow(self, key: Hashable, now: float) -> int | None:
        """Take a token for ``key``: the count of lines suppressed since the last one, or None."""
        buckets = self._buckets
        bucket = buckets.get(key)
        limit = self.limit
        if bucket is None:
            bucket = buckets[key] = _Bucket(float(limit.burst), now)
            if len(buckets) > limit.max_keys:
                buckets.popitem(last=False)
        else:
            buckets.move_to_end(key)
            elapsed = max(0.0, now - bucket.updated)
            bucket.tokens = min(float(limit.burst), bucket.tokens + elapsed * self._rate)
            bucket.updated = now
        if bucket.tokens < 1.0:
            bucket.suppressed += 1
            self.suppressed += 1
            return None
        bucket.tokens -= 1.0
        held, bucket.suppressed = bucket.suppressed, 0
        return held

    def forget(self, key: Hashable) -> None:
        """Drop ``key``'s bucket (its endpoint left)."""
        self._buckets.pop(key, None)

    def __len__(self) -> int:
        return len(self._buckets)


class LimitedLog:
    """Writes to the ``poise_py`` logger through a :class:`RateLimiter`."""

    def __init__(self, limit: LogLimit, log: logging.Logger = logger) -> None:
        self.limiter: RateLimiter = RateLimiter(limit)
        self.logger: logging.Logger = log

    def log(
        self,
        level: int,
        key: Hashable,
        now: float,
        msg: str,
        *args: object,
        exc_info: BaseException | None = None,
    ) -> bool:
        """Log ``msg % args`` unless ``key`` is over its limit; True if written.

        Lines for a level the logger would drop cost no token.
        """
        log = self.logger
        if not log.isEnabledFor(level):
            return False
        held = self.limiter.allow(key, now)
        if held is None:
            return False
        if held:
            msg += " (%d similar lines suppressed)"
            args = (*args, held)
        log.log(level, msg, *args, exc_info=exc_info)
        return True
