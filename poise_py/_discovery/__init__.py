"""Discovery sources, one module each: static, publisher (push), DNS and file.

Every source is an async iterable of :data:`Update` values (:class:`Snapshot` or
:class:`Delta`), defined in the pure core (``poise_py._core._updates``) because the core's
directory applies them. The balancer's membership (``poise_py._membership``) consumes them.
"""

from __future__ import annotations

from .._core._updates import Delta, DiscoveryEnd, Snapshot, Update
from ._static import StaticDiscovery

__all__ = ["Delta", "DiscoveryEnd", "Snapshot", "StaticDiscovery", "Update"]
