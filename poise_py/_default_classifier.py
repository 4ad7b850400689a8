"""Classifiers: exception -> :class:`Fault`.

A classifier is a plain function ``(BaseException) -> Fault | Classification``. Compose
your own by handling what you know and delegating the rest to :func:`default_classifier`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

from ._errors import PoiseError
from ._faults import Classification, Fault

Classifier: TypeAlias = Callable[[BaseException], "Fault | Classification"]

_CALLER_ERRORS = (
    TypeError,
    ValueError,
    KeyError,
    IndexError,
    AttributeError,
    LookupError,
    NotImplementedError,
)


class FaultError(Exception):
    """Raise this (or set ``poise_fault`` on your own exception) to state the fault yourself.

    Attributes:
        fault: the tier to record.
        retry_after: optional seconds the server asked for.
        overload: the failure is load-shaped (see :class:`Classification`).
    """

    poise_fault: Classification

    def __init__(
        self, fault: Fault, message: str = "", *, retry_after: float | None = None, overload: bool = False
    ) -> None:
        self.poise_fault = Classification(fault, retry_after=retry_after, overload=overload)
        super().__init__(message or fault.value)


def default_classifier(exc: BaseException) -> Fault | Classification:
    """Map an exception to a fault with no knowledge of the protocol.

    - an exception carrying ``poise_fault`` (a :class:`Fault` or :class:`Classification`,
      as :class:`FaultError` does) gets exactly that;
    - poise_py's own errors and programming errors in the caller's code (``TypeError``,
      ``ValueError``, ``KeyError``...) are CALLER: they say nothing about the endpoint;
    - everything else (``OSError``, ``TimeoutError``, protocol errors) is SUSPECT: a strike,
      never an ejection on its own; a ``TimeoutError`` is load-shaped (``overload=True``).
    """
    marked = getattr(exc, "poise_fault", None)
    if isinstance(marked, Fault | Classification):
        return marked
    if isinstance(exc, (PoiseError, *_CALLER_ERRORS)) and not isinstance(exc, OSError):
        return Fault.CALLER
    if isinstance(exc, TimeoutError):
        return _TIMED_OUT
    return Fault.SUSPECT


_TIMED_OUT = Classification(Fault.SUSPECT, overload=True)


def classifier_problem(classifier: object) -> str:
    """Why ``classifier`` is refused (it is not callable), ending with the classifier to write."""
    got = f"{classifier!r:.80}"
    if isinstance(classifier, str):
        name = classifier.strip().lower()
        preset = "http" if name in ("http", "https", "httpx") else "grpc" if name in ("grpc", "grpc.aio") else None
        if preset is not None:
            return (
                f"must be a function exception -> Fault, not the string {got}: "
                f"write classifier=poise.classify.{preset}()"
            )
    return (
        f"must be a function exception -> Fault, got {got}: write poise.default_classifier, "
        "poise.classify.http(), poise.classify.grpc() or your own function"
    )
