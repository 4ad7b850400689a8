"""Text from outside, made safe to show: secrets in addresses redacted, length bounded.

Endpoint ids, addresses, values read from a shared store and the messages of errors
raised by other code come from outside the process. Wherever poise_py shows such text (a
log line, an event's error, the status page) it goes through :func:`shown`:

- :func:`redact` replaces the userinfo of an address (``https://user:pass@host`` and
  ``user:pass@host``) and the values of query parameters whose names look secret
  (``?api_key=...``, ``&token=...``, ``&X-Amz-Signature=...``) with :data:`MARK`;
- then it keeps the first :data:`TEXT_LIMIT` characters and notes the original length:
  ``'<first 500 characters>… (4002101 characters)'``.

Redaction comes first, so a cut never leaves half a secret to show. Both are linear in
the text's length (no pattern can backtrack over a long run; the query parameters are
looked at only as far as the shown part reaches), and text that cannot hold a secret (no
``@``, no ``=``) costs two substring tests. :func:`shown_error` does the same
for an exception: a copy of the same type whose message is shown text, or the exception
itself when its message needs nothing.
"""

from __future__ import annotations

import functools
import re
from typing import TypeVar

TEXT_LIMIT = 500
"""Characters of one piece of outside text that are shown; the rest is noted by its length."""

MARK = "***"
"""What replaces a secret."""

E = TypeVar("E", bound=BaseException)

# The userinfo of a URL: from "://" to the authority's last "@" (the authority ends at the
# first "/", "?", "#" or blank). Anchored on the literal "://", so no scan starts elsewhere.
_URL_USERINFO = re.compile(r"://[^/?#\s]*@")
# "user:pass@host" with no scheme, at the start of a token: a name, a colon, then the
# secret up to the "@". A scan starts only after a blank, a quote or one of "(<[,=" and
# stops at the next of them, so no two scans cover the same characters.
_BARE_USERINFO = re.compile(r"""(?<![^\s'"(<\[,=])[^\s/?#@:'"(<\[,=]+:[^\s/?#@'"(<\[,=]*@""")
# One query (or fragment) parameter: its separator, its name, its value.
_PARAMETER = re.compile(r"([?&;#])([^=&#\s]*)=([^&#\s'\"]*)")
_WORD = re.compile(r"[a-z0-9]+")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_SECRET_WORDS = frozenset({"key", "sig", "pwd", "pass", "auth", "session", "private", "jwt", "sid"})
"""Words that make a parameter name secret when they stand alone in it (``api_key``, ``sig``)."""
_SECRET_PARTS = ("token", "secret", "passw", "passphrase", "signature", "credential", "apikey", "accesskey", "cookie")
"""Parts that make a parameter name secret anywhere in it (``access_token``, ``X-Amz-Signature``)."""


@functools.lru_cache(maxsize=256)
def secret_name(name: str) -> bool:
    """True if a query parameter called ``name`` looks like it carries a secret."""
    lowered = _CAMEL.sub(r"\1_\2", name).lower()
    if any(word in _SECRET_WORDS for word in _WORD.findall(lowered)):
        return True
    squashed = "".join(_WORD.findall(lowered))
    return any(part in squashed for part in _SECRET_PARTS)


def redact(text: str) -> str:
    """``text`` with the userinfo of addresses and secret-looking query values replaced by :data:`MARK`."""
    return _redact(text, None)


def _redact(text: str, enough: int | None) -> str:
    """:func:`redact`, done only as far as the first ``enough`` characters of the result need."""
    if "@" in text:
        text = _URL_USERINFO.sub(f"://{MARK}@", text)
        text = _BARE_USERINFO.sub(f"{MARK}@", text)
    if "=" not in text:
        return text
    # The parameters one by one (a callback per match is slow): stop once the result is
    # long enough to be cut, so a long run of parameters costs only what is shown.
    out: list[str] = []
    size = last = 0
    for match in _PARAMETER.finditer(text):
        if enough is not None and size + match.start() - last > enough:
            break
        name, value = match.group(2, 3)
        if not value or not secret_name(name):
            continue
        kept = text[last : match.start(3)]
        out.append(kept)
        out.append(MARK)
        size += len(kept) + len(MARK)
        last = match.end(3)
        if enough is not None and size > enough:
            return "".join(out)
    out.append(text[last:])
    return "".join(out)


_NOTE = re.compile(r"… \(\d+ characters\)")


def shown(text: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` redacted, then cut to ``limit`` characters; a cut notes the original length.

    Shown text is shown as it is (a text cut once keeps the length of its original).
    """
    safe = _redact(text, limit)
    if len(safe) <= limit or _NOTE.fullmatch(safe, limit):
        return safe
    return f"{safe[:limit]}… ({len(text)} characters)"


def shown_value(value: object, limit: int = TEXT_LIMIT) -> object:
    """A string shown (:func:`shown`), an exception shown (:func:`shown_error`), anything else as it is."""
    if isinstance(value, str):
        return shown(value, limit)
    if isinstance(value, BaseException):
        return shown_error(value, limit)
    return value


def _text_of(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a broken __str__ must not break what shows it
        return f"<{type(exc).__name__} whose message cannot be read>"


_CHAIN_DEPTH = 8
"""How many causes and contexts deep :func:`shown_error` looks (a chain can be long, or a loop)."""


def shown_error(exc: E, limit: int = TEXT_LIMIT, *, _depth: int = 0) -> E:
    """``exc`` if its message, notes and chained causes need nothing; else a copy that shows them.

    The copy has the same type when that type can be made without its constructor (most
    can: the message is ``args``), the same attributes, traceback and chain (each shown in
    turn); a type whose message does not come from ``args`` gives way to its nearest base
    class that does. An exception group is copied with each of its exceptions shown. The
    original is never changed.
    """
    deeper = _depth < _CHAIN_DEPTH
    cause, context = exc.__cause__, exc.__context__
    safe_cause = shown_error(cause, limit, _depth=_depth + 1) if deeper and cause is not None else cause
    safe_context = shown_error(context, limit, _depth=_depth + 1) if deeper and context is not None else context
    notes = getattr(exc, "__notes__", None)
    safe_notes = [shown(n, limit) if isinstance(n, str) else n for n in notes] if isinstance(notes, list) else notes
    same = safe_cause is cause and safe_context is context and safe_notes == notes
    copy: BaseException
    if isinstance(exc, BaseExceptionGroup):
        members = [shown_error(e, limit, _depth=_depth + 1) if deeper else e for e in exc.exceptions]
        message = shown(exc.message, limit)
        if message == exc.message:
            if same and all(a is b for a, b in zip(members, exc.exceptions, strict=True)):
                return exc
            copy = exc.derive(members)  # the same type, as the group itself would split
        else:
            copy = BaseExceptionGroup(message, members)
    else:
        text = _text_of(exc)
        safe = shown(text, limit)
        if same and safe == text:
            return exc
        copy = _rebuilt(exc, safe)
    if safe_notes is not None:
        copy.__notes__ = safe_notes
    copy.__cause__ = safe_cause
    copy.__context__ = safe_context
    copy.__suppress_context__ = exc.__suppress_context__
    copy.__traceback__ = exc.__traceback__
    return copy  # type: ignore[return-value] # E, or the nearest base of E that can show the text


def _rebuilt(exc: BaseException, message: str) -> BaseException:
    """A new exception showing ``message``: ``exc``'s type if it can, else the nearest base that can."""
    for cls in type(exc).__mro__:
        if not issubclass(cls, BaseException):
            continue
        try:
            copy = cls.__new__(cls)
            copy.args = (message,)
            if cls is type(exc) and hasattr(exc, "__dict__"):
                copy.__dict__.update(exc.__dict__)
            if isinstance(exc, OSError) and isinstance(copy, OSError):
                copy.errno = exc.errno  # a C field, not in __dict__ (strerror is in the message)
        except Exception:  # noqa: BLE001, S112 - this type needs its constructor: try its base
            continue
        if _text_of(copy) in (message, repr(message)):  # KeyError shows its message's repr
            return copy
    return BaseException(message)  # unreachable: BaseException can always be made so
