"""``TimeRing`` keeps the bucket being filled in fields: it must count exactly as writing every outcome through."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from poise_py._core._window import FAILED, SLOW, TimeRing


class WriteThrough:
    """The reference: every outcome written to its bucket's slot at once (the ring before the change)."""

    def __init__(self, duration: float, buckets: int) -> None:
        self.n = buckets
        self.width = duration / buckets
        self.clear()

    def add(self, flags: int, now: float) -> None:
        tick = int(now // self.width)
        i = tick % self.n
        if self.epochs[i] != tick:
            self.epochs[i] = tick
            self.volume[i] = self.failures[i] = self.slow[i] = 0
        self.volume[i] += 1
        self.failures[i] += flags & FAILED
        self.slow[i] += (flags & SLOW) >> 1

    def counts(self, now: float) -> tuple[int, int, int]:
        oldest = int(now // self.width) - self.n + 1
        kept = [i for i, tick in enumerate(self.epochs) if tick >= oldest]
        return (
            sum(self.volume[i] for i in kept),
            sum(self.failures[i] for i in kept),
            sum(self.slow[i] for i in kept),
        )

    def clear(self) -> None:
        self.epochs = [-1] * self.n
        self.volume = [0] * self.n
        self.failures = [0] * self.n
        self.slow = [0] * self.n


steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 3), st.floats(0.0, 200.0)),
        st.tuples(st.just("counts"), st.just(0), st.floats(0.0, 200.0)),
        st.tuples(st.just("clear"), st.just(0), st.just(0.0)),
    ),
    max_size=60,
)


@settings(max_examples=300)
@given(duration=st.floats(1.0, 60.0), buckets=st.integers(1, 12), script=steps, forward=st.booleans())
def test_time_ring_counts_as_writing_every_outcome_through(
    duration: float, buckets: int, script: list[tuple[str, int, float]], forward: bool
) -> None:
    if forward:  # the usual case: a clock that never goes back
        times = sorted(now for _, _, now in script)
        script = [(op, flags, now) for (op, flags, _), now in zip(script, times, strict=True)]
    ring, reference = TimeRing(duration, buckets), WriteThrough(duration, buckets)
    for op, flags, now in script:
        if op == "add":
            ring.add(flags, now)
            reference.add(flags, now)
        elif op == "counts":
            assert ring.counts(now) == reference.counts(now)
        else:
            ring.clear()
            reference.clear()
    for _, _, now in script:
        assert ring.counts(now) == reference.counts(now)
