"""An asyncio event loop on virtual time: asyncio's counterpart of Trio's autojumping MockClock.

``loop.time()`` starts at 0 and moves only when every task is waiting: instead of blocking
in the selector until the next timer, the loop jumps its clock to that timer. I/O that is
ready is still served first, so in-memory tests run in no real time. The loop itself lives
in ``poise_py.sim._virtual_loop`` (the simulator runs coordinated fleets on it); a test asks
for it with ``@pytest.mark.virtual_asyncio`` (see ``tests/conftest.py``).
"""

from __future__ import annotations

from poise_py.sim._virtual_loop import VirtualTimeLoop

__all__ = ["VirtualTimeLoop"]
