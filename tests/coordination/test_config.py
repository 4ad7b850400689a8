"""Honesty at start-up: a configuration the storage cannot honour is refused, never degraded."""

from __future__ import annotations

import pytest

import poise_py as poise
from tests.support.clocks import endpoints

ESCALATING = poise.Escalation(base=30.0, maximum=300.0)
CONSTANT = poise.Escalation(base=30.0, maximum=30.0)


def build(
    circuit: poise.CircuitPolicy, storage: poise.Storage, *, max_open_wait: float | None = None
) -> poise.LoadBalancer:
    return poise.LoadBalancer(
        poise.StaticDiscovery(endpoints("a")),
        circuit=circuit,
        coordination=poise.Coordination(storage, max_open_wait=max_open_wait),
    )


def test_a_protocol_1_storage_refuses_an_escalating_open_wait() -> None:
    with pytest.raises(poise.ConfigError) as info:
        build(poise.CircuitPolicy(escalation=ESCALATING), poise.InMemoryStorage(protocol_version=1))
    assert info.value.knob == "CircuitPolicy.escalation"
    assert "protocol 1" in str(info.value)


def test_the_default_cap_makes_the_shared_wait_constant_at_the_default_base() -> None:
    coordination = poise.Coordination()
    assert coordination.max_open_wait == 30.0
    shared = coordination.shared_escalation(poise.Escalation())
    assert (shared.base, shared.maximum) == (30.0, 30.0)
    assert poise.Coordination(max_open_wait=120.0).shared_escalation(ESCALATING).maximum == 120.0
    assert poise.Coordination(max_open_wait=None).shared_escalation(ESCALATING) == ESCALATING
    small = poise.Coordination(max_open_wait=10.0).shared_escalation(ESCALATING)
    assert (small.base, small.maximum) == (10.0, 10.0)
    # a constant shared wait is what protocol 1 keeps: the default cap lets it run beside
    build(poise.CircuitPolicy(escalation=ESCALATING), poise.InMemoryStorage(protocol_version=1), max_open_wait=30.0)


def test_a_protocol_1_storage_accepts_a_constant_open_wait_and_protocol_2_accepts_both() -> None:
    build(poise.CircuitPolicy(escalation=CONSTANT), poise.InMemoryStorage(protocol_version=1))
    build(poise.CircuitPolicy(escalation=CONSTANT), poise.InMemoryStorage())
    build(poise.CircuitPolicy(escalation=ESCALATING), poise.InMemoryStorage())


@pytest.mark.parametrize(
    ("circuit", "knob"),
    [
        (
            poise.CircuitPolicy(escalation=poise.Escalation(reset_on_success=False)),
            "CircuitPolicy.escalation",
        ),
        (poise.CircuitPolicy(hard_cap=poise.HardCap(max_ejections=3)), "CircuitPolicy.hard_cap"),
        (poise.CircuitPolicy(permitted_probes=1, success_threshold=2), "CircuitPolicy.success_threshold"),
    ],
)
def test_policies_a_shared_circuit_cannot_carry_out_are_refused(circuit: poise.CircuitPolicy, knob: str) -> None:
    with pytest.raises(poise.ConfigError) as info:
        build(circuit, poise.InMemoryStorage())
    assert info.value.knob == knob


class AncientStorage(poise.InMemoryStorage):
    """A third-party storage from before protocol versions were numbered."""

    @property
    def protocol_version(self) -> int:
        return 0


def test_a_storage_older_than_protocol_1_is_refused() -> None:
    with pytest.raises(poise.ConfigError) as info:
        poise.Coordination(AncientStorage())
    assert info.value.knob == "Coordination.storage"


def test_coordination_validates_its_knobs() -> None:
    for kwargs, knob in [
        ({"sync_interval": 0}, "Coordination.sync_interval"),
        ({"timeout": -1}, "Coordination.timeout"),
        ({"probe_lease": float("inf")}, "Coordination.probe_lease"),
        ({"on_change": 3}, "Coordination.on_change"),
        ({"max_open_wait": 0}, "Coordination.max_open_wait"),
        ({"max_open_wait": float("nan")}, "Coordination.max_open_wait"),
    ]:
        with pytest.raises(poise.ConfigError) as info:
            poise.Coordination(poise.InMemoryStorage(), **kwargs)  # type: ignore[arg-type]
        assert info.value.knob == knob
    with pytest.raises(poise.ConfigError) as info:
        poise.Coordination(object())  # type: ignore[arg-type]
    assert info.value.knob == "Coordination.storage"
    with pytest.raises(poise.ConfigError) as info:
        poise.LoadBalancer(poise.StaticDiscovery(endpoints("a")), coordination=poise.InMemoryStorage())  # type: ignore[arg-type]
    assert info.value.knob == "coordination"


def test_the_default_coordination_is_an_in_process_storage_shared_by_its_users() -> None:
    shared = poise.Coordination()
    assert isinstance(shared.storage, poise.InMemoryStorage)
    assert shared.storage.protocol_version == poise.PROTOCOL_VERSION
    a = poise.LoadBalancer(poise.StaticDiscovery(endpoints("a")), coordination=shared)
    assert a.coordination_statistics() is not None
    assert poise.LoadBalancer(poise.StaticDiscovery(endpoints("a"))).coordination_statistics() is None


def test_open_wait_validates_its_draw_and_floor() -> None:
    with pytest.raises(poise.ConfigError):
        poise.OpenWait(escalation=ESCALATING, unit=1.0)
    with pytest.raises(poise.ConfigError):
        poise.OpenWait(escalation=ESCALATING, minimum=float("nan"))
    with pytest.raises(poise.ConfigError):
        poise.SharedState(state=poise.CircuitState.BLOCKED)
