"""An asyncio event loop on virtual time: asyncio's counterpart of Trio's autojumping MockClock.

``loop.time()`` starts at 0 and moves only when every task is waiting: instead of blocking
in the selector until the next timer, the loop jumps its clock to that timer. I/O that is
ready is still served first, so in-memory tests run in no real time. The loop itself lives
in ``poise_py.sim._virtual_loop`` (the simulator runs coordinated fleets on it); use it
through :data:`VIRTUAL_BACKENDS` as an ``anyio_backend`` parametrisation.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio.testing

from poise_py.sim._virtual_loop import VirtualTimeLoop

VIRTUAL_BACKENDS = [
    pytest.param(("trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}), id="trio"),
    pytest.param(("asyncio", {"loop_factory": VirtualTimeLoop}), id="asyncio"),
]
"""``anyio_backend`` parameters: Trio on an autojumping MockClock, asyncio on virtual time."""


def virtual_backend(request: pytest.FixtureRequest) -> Any:
    """The body of an ``anyio_backend`` fixture parametrised with :data:`VIRTUAL_BACKENDS`."""
    return request.param
