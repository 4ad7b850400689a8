"""The pure decision logic: no anyio, no await, no clock reads.

Time comes in as ``now`` (seconds on any monotonic scale); deadlines go out.
"""
