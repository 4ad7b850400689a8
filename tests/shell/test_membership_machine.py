"""Hypothesis: under any sequence of updates, the live pool is the last successfully applied revision.

Updates are drawn to be valid or not (stale, duplicate and overflowing revisions, duplicate
or unknown identities, endpoint factories that fail), interleaved with permits taken and
finished. A reference model says what each update should do; the machine checks that a
rejected update changes nothing at all, that an applied one gives exactly the model's pool,
that survivors keep their state object (circuit, counters, resource) and that every
resource the factory built is either live, still used by a permit, or closed exactly once.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable

import anyio
import attrs
import hypothesis.strategies as st
import pytest
import trio
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import poise_py as poise
from poise_py._core._circuit import Ticket
from poise_py._core._directory import MAX_REVISION
from poise_py._core._listener import NullListener
from poise_py._core._pool import Pool
from poise_py._core._record import Member
from poise_py._membership import Membership

UNIVERSE = ("a", "b", "c", "d", "e")

endpoint_st = st.builds(lambda i, w: poise.Endpoint(i, weight=w), st.sampled_from(UNIVERSE), st.sampled_from([1, 2]))
ids_st = st.lists(st.sampled_from(UNIVERSE), max_size=3)
revision_st = st.sampled_from(["next", "jump", "duplicate", "stale", "overflow", "max"])
fail_st = st.frozensets(st.sampled_from(UNIVERSE), max_size=2)


@attrs.define(eq=False)
class Resource:
    endpoint: poise.Endpoint
    closed: int = 0


class _IdleListener(NullListener):
    """Hands an idle endpoint to the membership, as the balancer's listener does."""

    membership: Membership | None = None

    def idle(self, state: Member) -> None:
        assert self.membership is not None
        self.membership.idle(state)


class MembershipMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        listener = _IdleListener()
        self.pool = Pool(poise.CircuitPolicy(), poise.RoundRobin(), random.Random(0), listener=listener)
        self.membership = listener.membership = Membership(self.pool, factory=self.build, close=self.close)
        self.fail: frozenset[str] = frozenset()
        self.built: list[Resource] = []
        self.model: dict[str, poise.Endpoint] = {}
        self.revision: int | None = None
        self.permits: list[tuple[Member, Ticket]] = []
        self.now = 0.0

    # -- the factory and its close ----------------------------------------------------

    def build(self, endpoint: poise.Endpoint) -> Resource:
        if endpoint.id in self.fail:
            raise OSError(f"cannot build {endpoint.id}")
        resource = Resource(endpoint)
        self.built.append(resource)
        return resource

    def close(self, resource: Resource) -> None:
        resource.closed += 1

    # -- driving ----------------------------------------------------------------------

    def run(self, action: Callable[..., object], *args: object) -> None:
        """Run one step in a fresh Trio run, with a task group for the closes it schedules."""
        rejected: list[poise.DiscoveryError] = []

        async def step() -> None:
            async with anyio.create_task_group() as tg:
                self.membership.attach(tg, self.clock)
                try:
                    result = action(*args)
                    if inspect.isawaitable(result):
                        await result
                except poise.DiscoveryError as exc:
                    rejected.append(exc)
                finally:
                    self.membership.detach()

        trio.run(step)
        if rejected:
            raise rejected[0]

    def clock(self) -> float:
        self.now += 1.0
        return self.now

    def next_revision(self, kind: str) -> int:
        live = self.revision
        base = -1 if live is None else live
        if kind == "duplicate" and live is not None:
            return live
        if kind == "stale" and live is not None and live > 0:
            return live - 1
        if kind == "overflow":
            return MAX_REVISION + 1
        if kind == "max":
            return MAX_REVISION
        if kind == "jump":
            return min(base + 1000, MAX_REVISION)
        return base + 1

    def expect(
        self, update: poise.Update
    ) -> tuple[type[poise.DiscoveryError] | None, dict[str, poise.Endpoint], list[str]]:
        """The reference: (the error expected, or None; the pool after; the ids that start fresh)."""
        revision, live = update.revision, self.revision
        if revision > MAX_REVISION:
            return poise.RevisionOverflow, self.model, []
        if live is not None and revision == live:
            return poise.DuplicateRevision, self.model, []
        if live is not None and revision < live:
            return poise.StaleRevision, self.model, []
        if isinstance(update, poise.Snapshot):
            ids = [e.id for e in update.endpoints]
            if len(set(ids)) != len(ids):
                return poise.DuplicateIdentity, self.model, []
            after = {e.id: e for e in update.endpoints}
            fresh = [i for i in after if i not in self.model]
        else:
            ids = [e.id for e in (*update.added, *update.updated)]
            if len(set(ids)) != len(ids) or len(set(update.removed)) != len(update.removed):
                return poise.DuplicateIdentity, self.model, []
            gone = set(update.removed)
            if any(e.id in self.model and e.id not in gone for e in update.added):
                return poise.DuplicateIdentity, self.model, []
            if any(e.id not in self.model or e.id in gone for e in update.updated):
                return poise.UnknownIdentity, self.model, []
            after = dict(self.model)
            for i in update.removed:
                after.pop(i, None)
            after.update({e.id: e for e in update.updated})
            after.update({e.id: e for e in update.added})
            fresh = [e.id for e in update.added]
        if any(i in self.fail for i in fresh):
            return poise.EndpointFactoryError, self.model, []
        return None, after, fresh

    def offer(self, update: poise.Update, fail: frozenset[str]) -> None:
        self.fail = fail
        error, after, fresh = self.expect(update)
        before = dict(self.pool.members)
        if error is not None:
            with pytest.raises(error) as caught:
                self.run(self.membership.apply, update, self.clock)
            assert type(caught.value) is error
            if error is poise.EndpointFactoryError:
                assert isinstance(caught.value.__cause__, OSError)
            assert self.pool.members == before  # the very same state objects: nothing applied
            return
        self.run(self.membership.apply, update, self.clock)
        for i, state in self.pool.members.items():
            if i in fresh:
                assert state is not before.get(i), f"{i} must start fresh"
            else:
                assert state is before[i], f"{i} must keep its state"
        self.model, self.revision = after, update.revision

    # -- rules ------------------------------------------------------------------------

    @rule(kind=revision_st, endpoints=st.lists(endpoint_st, max_size=6), fail=fail_st)
    def snapshot(self, kind: str, endpoints: list[poise.Endpoint], fail: frozenset[str]) -> None:
        self.offer(poise.Snapshot(self.next_revision(kind), endpoints), fail)

    @rule(
        kind=revision_st,
        added=st.lists(endpoint_st, max_size=3),
        removed=ids_st,
        updated=st.lists(endpoint_st, max_size=2),
        fail=fail_st,
    )
    def delta(
        self,
        kind: str,
        added: list[poise.Endpoint],
        removed: list[str],
        updated: list[poise.Endpoint],
        fail: frozenset[str],
    ) -> None:
        update = poise.Delta(self.next_revision(kind), added=added, removed=removed, updated=updated)
        self.offer(update, fail)

    @precondition(lambda self: self.pool.available_count > 0)
    @rule()
    def take_permit(self) -> None:
        state, ticket, _, _ = self.pool.select(self.clock())
        self.permits.append((state, ticket))

    @precondition(lambda self: bool(self.permits))
    @rule(data=st.data())
    def finish_permit(self, data: st.DataObject) -> None:
        state, ticket = self.permits.pop(data.draw(st.integers(0, len(self.permits) - 1)))
        cancel = data.draw(st.booleans())

        def finish() -> None:
            if cancel:
                self.pool.cancel(state, ticket)
            else:
                self.pool.complete(state, ticket, poise.Fault.SUSPECT, self.clock())

        self.run(finish)

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def live_pool_is_the_last_applied_revision(self) -> None:
        assert {i: s.endpoint for i, s in self.pool.members.items()} == self.model
        assert self.membership.revision == self.revision

    @invariant()
    def every_resource_is_live_in_use_or_closed_once(self) -> None:
        resources = self.membership.resources
        live = {id(resources.get(s)) for s in self.pool.members.values()}
        in_use = {id(resources.get(s)) for s, _ in self.permits if not s.live}
        for resource in self.built:
            if id(resource) in live:
                assert resource.closed == 0
                assert resources.get(self.pool.members[resource.endpoint.id]) is resource
            elif id(resource) in in_use:
                assert resource.closed == 0
            else:
                assert resource.closed == 1, resource

    @invariant()
    def inflight_counts_match_the_permits_out(self) -> None:
        for state in self.pool.members.values():
            assert state.inflight == sum(1 for s, _ in self.permits if s is state)


MembershipMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
TestMembership = MembershipMachine.TestCase
