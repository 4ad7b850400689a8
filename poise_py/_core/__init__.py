"""The pure decision logic: no anyio, no await, no clock reads.

Time comes in as ``now`` (seconds on any monotonic scale); deadlines go out
(``next_deadline()`` / ``handle_timer(now)`` on the pool and the circuit). Nothing here
imports anyio, trio, asyncio or sniffio, directly or through another module
(``tests/core/test_pure_import.py`` checks it). The pool reports to the shell through one
:class:`~poise_py._core._listener.PoolListener`.
"""
