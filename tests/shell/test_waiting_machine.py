"""The wait queue's invariants under any interleaving (hypothesis ``RuleBasedStateMachine``).

The queue (``poise_py._waiting.WaitQueue``) is driven without an event loop: callers join
and are cancelled, slots free up, time passes and the timer fires the queue as the
balancer's one timer does. After every step:

- waiters are served in the order they joined (no one overtakes);
- no waiter is served or refused after its deadline, and none is refused before it;
- after the timer has fired, nobody waits while a slot is free;
- every slot is either free, held by a served waiter, or was given back by a cancelled one;
- the "someone waits" flag the permits' exit reads is true exactly while someone waits.
"""

from __future__ import annotations

import math

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from poise_py import NoEligibleEndpoints
from poise_py._errors import SelectionError
from poise_py._waiting import WaitQueue


class FakePermit:
    def __init__(self, machine: WaitMachine, serial: int) -> None:
        self.machine = machine
        self.serial = serial  # the order permits were handed out in
        self.done = False

    def cancel(self, *, superseded: bool = False) -> None:
        assert not self.done
        self.done = True
        self.machine.free += 1


class WaitMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.free = 0
        self.flag = False
        self.wakes = 0
        self.issued = 0
        self.queue = WaitQueue(
            self._select,  # type: ignore[arg-type]
            self._refused,
            lambda: self.now,
            self._wake,
            self._signal,
        )
        self.waiters: list[tuple[int, object]] = []  # (join order, waiter) still waiting
        self.joined = 0
        self.served: list[tuple[int, int]] = []  # (permit serial, join order)
        self.held: list[FakePermit] = []
        self.fired = True

    def _select(self, key: object, exclude: object) -> FakePermit:
        if self.free <= 0:
            raise NoEligibleEndpoints({}, 1, retry_after=None)
        self.free -= 1
        self.issued += 1
        return FakePermit(self, self.issued)

    def _refused(self, error: SelectionError) -> SelectionError:
        return error

    def _wake(self) -> None:
        self.wakes += 1

    def _signal(self, waiting: bool) -> None:
        self.flag = waiting

    def _fire(self) -> None:
        """What the balancer's timer does: fire while the queue is due at ``now``."""
        for _ in range(1000):
            deadline = self.queue.next_deadline()
            if deadline is None or deadline > self.now:
                break
            self.queue.handle_timer(self.now)
        self._collect()
        self.fired = True

    def _collect(self) -> None:
        still = []
        for order, waiter in self.waiters:
            if not waiter.settled:  # type: ignore[attr-defined]
                still.append((order, waiter))
                continue
            permit = waiter.permit  # type: ignore[attr-defined]
            if permit is not None:
                assert self.now <= waiter.deadline + 1e-9  # type: ignore[attr-defined]
                self.served.append((permit.serial, order))
                self.held.append(permit)
            else:
                assert waiter.error is not None  # type: ignore[attr-defined]
                assert self.now >= waiter.deadline - 1e-9  # type: ignore[attr-defined] # refused only at its deadline
        self.waiters = still

    @rule(wait=st.sampled_from([0.0, 0.5, 1.0, 5.0, 30.0]))
    def join(self, wait: float) -> None:
        first = self.queue.first(None, ())
        if not isinstance(first, SelectionError):
            self.served.append((first.serial, self.joined))  # type: ignore[attr-defined]
            self.held.append(first)  # type: ignore[arg-type]
        else:
            waiter = self.queue.join(None, (), wait)
            self.waiters.append((self.joined, waiter))
        self.joined += 1
        self.fired = False

    @precondition(lambda self: bool(self.waiters))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.waiters) - 1))
        _, waiter = self.waiters.pop(i)
        self.queue.leave(waiter)  # type: ignore[arg-type]
        self.fired = False

    @rule(n=st.integers(1, 3))
    def slots_free(self, n: int) -> None:
        self.free += n
        self.queue.changed()
        self.fired = False

    @precondition(lambda self: bool(self.held))
    @rule()
    def call_ends(self) -> None:
        self.held.pop(0)
        self.free += 1
        self.queue.changed()
        self.fired = False

    @rule(dt=st.sampled_from([0.0, 0.1, 0.5, 1.0, 10.0]))
    def time_passes(self, dt: float) -> None:
        """The timer sleeps to each deadline on the way, as the balancer's does."""
        end = self.now + dt
        self._fire()
        while True:
            deadline = self.queue.next_deadline()
            if deadline is None or deadline > end:
                break
            self.now = max(self.now, deadline)
            self._fire()
        self.now = end
        self._fire()

    @invariant()
    def served_in_arrival_order_among_waiters(self) -> None:
        in_grant_order = [order for _, order in sorted(self.served)]
        assert in_grant_order == sorted(in_grant_order)

    @invariant()
    def nobody_waits_beside_a_free_slot_once_the_timer_fired(self) -> None:
        if self.fired:
            assert not self.waiters or self.free <= 0

    @invariant()
    def the_flag_says_whether_anyone_waits(self) -> None:
        assert self.flag == (len(self.queue) > 0)
        assert len(self.queue) == len(self.waiters)

    @invariant()
    def the_queue_is_due_at_once_after_a_change_and_otherwise_at_the_first_deadline(self) -> None:
        deadline = self.queue.next_deadline()
        if not self.waiters:
            assert deadline is None
        elif deadline != -math.inf:
            assert deadline == min(w.deadline for _, w in self.waiters)  # type: ignore[attr-defined]


WaitMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestWaitQueue = WaitMachine.TestCase
