"""Integrations with other libraries, each behind its own optional extra.

Nothing here is imported by ``import poise_py``: import the module you need, e.g.
``from poise_py.contrib.httpx import balanced_client`` (extra ``poise_py[httpx]``),
``from poise_py.contrib.grpc import BalancedChannel`` (extra ``poise_py[grpc]``) or
``from poise_py.contrib.otel import instrument`` (extra ``poise_py[otel]``).
"""
