"""Fleet coordination: circuits shared through a storage (in-process, or Redis through coredis).

``_protocol`` is the wire contract (``Storage``, ``SharedState``), ``_memory`` and
``_redis`` (with ``_lua``) implement it, ``_config`` holds the public knob, and
``_coordinator`` is the balancer's side: the shell that performs, one storage operation at
a time and outside any lock, what the pure fleet core (``poise_py/_core/_fleet.py``)
decides about mirroring, publishing, leasing and falling back.
"""
