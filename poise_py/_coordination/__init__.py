"""Fleet coordination: circuits shared through a storage (in-process, or Redis through coredis).

``_protocol`` is the wire contract (``Storage``, ``SharedState``), ``_memory`` and
``_redis`` (with ``_lua``) implement it, ``_config`` holds the public knob, and
``_coordinator`` is the balancer's side: mirroring, publishing, leasing, falling back.
"""
