"""How the httpx transport and the gRPC channel report a classifier's verdict on a permit."""

from __future__ import annotations

from .. import Classification, Fault, Permit


def report_verdict(permit: Permit, verdict: Fault | Classification) -> Fault:
    """Report ``verdict`` on ``permit`` (a Classification with its ``retry_after`` and ``overload``).

    Returns:
        The fault recorded.
    """
    if isinstance(verdict, Classification):
        permit.fail(verdict.fault, retry_after=verdict.retry_after, overload=verdict.overload)
        return verdict.fault
    permit.fail(verdict)
    return verdict
