"""The status page against requests and text from outside: Host allowlist, security headers, bounded text.

A DNS-rebinding page reaches a loopback server under a name it controls, so the app
answers only the host names it is served as (421 otherwise); every response forbids
sniffing and framing, and the page's policy runs nothing but its own script and style;
ids, addresses and event text are redacted and bounded in what it serves.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

import anyio
import httpx
import pytest

import poise_py as poise
from poise_py.contrib.status import StatusApp, serve
from tests.contrib.test_status import call_app
from tests.support.clocks import TRIP_AT_ONCE, FakeClock, static_lb

pytestmark = pytest.mark.anyio

SECRET_URL = "https://svc:s3cr3t-pass@api.example.com:8443/v1/?api_key=k3y-value&region=eu&X-Amz-Signature=5ig"  # noqa: S105 - made up
SHOWN_URL = "https://***@api.example.com:8443/v1/?api_key=***&region=eu&X-Amz-Signature=***"


def _host(value: str) -> tuple[tuple[bytes, bytes], ...]:
    return ((b"host", value.encode()),)


# -- the Host allowlist ----------------------------------------------------------------


@pytest.mark.parametrize("path", ["/status.json", "/", "/nope"])
async def test_a_request_for_another_host_gets_421_and_no_data(path: str) -> None:
    app = StatusApp(static_lb("secret-endpoint"))
    status, headers, body = await call_app(app, path, headers=_host("evil.example:8080"))
    assert status == 421
    assert b"secret-endpoint" not in body
    assert headers[b"content-type"].startswith(b"text/plain")


@pytest.mark.parametrize("host", ["127.0.0.1:8080", "localhost:8080", "LocalHost.:8080", "[::1]:8080"])
async def test_the_loopback_names_on_the_served_port_are_answered(host: str, clock: FakeClock) -> None:
    lb = static_lb("a", clock=clock)
    app = StatusApp(lb)
    async with lb:
        status, _, body = await call_app(app, headers=_host(host))
    assert status == 200
    assert json.loads(body)["balancers"][0]["endpoints"][0]["id"] == "a"


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        (_host("127.0.0.1:9999"), "a loopback name on another port"),
        (_host("127.0.0.1"), "no port: port 80, not the served one"),
        (_host("evil.example"), "a rebound name"),
        (_host("127.0.0.1:8080@evil.example"), "not a host"),
        ((), "no Host header"),
        ((*_host("127.0.0.1:8080"), *_host("evil.example")), "two Host headers"),
        (((b"host", b"\xff:8080"),), "not ASCII"),
    ],
)
async def test_requests_that_do_not_name_the_served_host_get_421(
    headers: tuple[tuple[bytes, bytes], ...], why: str
) -> None:
    app = StatusApp(static_lb("a"))
    assert (await call_app(app, headers=headers))[0] == 421, why


async def test_the_address_the_app_is_served_on_is_answered_by_default() -> None:
    app = StatusApp(static_lb("a"))
    assert (await call_app(app, headers=_host("10.1.2.3:8080"), server=("10.1.2.3", 8080)))[0] == 200
    assert (await call_app(app, headers=_host("[fd00::5]:8080"), server=("FD00::5", 8080)))[0] == 200
    assert (await call_app(app, headers=_host("localhost"), server=("127.0.0.1", 80)))[0] == 200
    assert (await call_app(app, headers=_host("localhost"), server=("127.0.0.1", 443), scheme="https"))[0] == 200


async def test_allowed_hosts_replaces_the_default_for_a_page_behind_a_proxy() -> None:
    app = StatusApp(static_lb("a"), allowed_hosts=["status.example.com", "admin.example.com:8443"])
    assert app.allowed_hosts == ("status.example.com", "admin.example.com:8443")
    assert (await call_app(app, headers=_host("status.example.com")))[0] == 200
    assert (await call_app(app, headers=_host("STATUS.example.com:443")))[0] == 200  # a name alone: any port
    assert (await call_app(app, headers=_host("admin.example.com:8443")))[0] == 200
    assert (await call_app(app, headers=_host("admin.example.com:443")))[0] == 421  # name:port: that port only
    assert (await call_app(app, headers=_host("127.0.0.1:8080")))[0] == 421  # the default is replaced
    assert (await call_app(app, headers=_host("evil.example")))[0] == 421


async def test_allowed_hosts_star_answers_any_host() -> None:
    app = StatusApp(static_lb("a"), allowed_hosts=["*"])
    assert (await call_app(app, headers=_host("anything.example:1")))[0] == 200
    assert (await call_app(app, headers=()))[0] == 421  # still one Host header


@pytest.mark.parametrize("hosts", ["status.example.com", [], [""], ["a b"], [3], ["h:99999"], ["http://h/"], 7])
def test_bad_allowed_hosts_name_the_field(hosts: Any) -> None:
    with pytest.raises(poise.ConfigError) as info:
        StatusApp(static_lb("a"), allowed_hosts=hosts)
    assert info.value.knob == "allowed_hosts"


@pytest.mark.real_clock
async def test_hypercorn_answers_its_loopback_address_and_refuses_a_rebound_host(clock: FakeClock) -> None:
    lb = static_lb("secret-endpoint", clock=clock)
    app = StatusApp(lb)
    async with lb, anyio.create_task_group() as tg:
        port = await tg.start(serve, app)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            ours = await client.get("/status.json")
            rebound = await client.get("/status.json", headers={"host": f"evil.example:{port}"})
            by_name = await client.get("/status.json", headers={"host": f"localhost:{port}"})
        tg.cancel_scope.cancel()
    assert ours.status_code == 200
    assert by_name.status_code == 200
    assert rebound.status_code == 421
    assert "secret-endpoint" not in rebound.text


# -- the headers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "method", "headers"),
    [
        ("/", "GET", _host("127.0.0.1:8080")),
        ("/status.json", "GET", _host("127.0.0.1:8080")),
        ("/nope", "GET", _host("127.0.0.1:8080")),
        ("/status.json", "POST", _host("127.0.0.1:8080")),
        ("/status.json", "GET", _host("evil.example")),
    ],
)
async def test_every_response_forbids_sniffing_and_framing(
    path: str, method: str, headers: tuple[tuple[bytes, bytes], ...]
) -> None:
    app = StatusApp(static_lb("a"))
    _, sent, _ = await call_app(app, path, method=method, headers=headers)
    assert sent[b"x-content-type-options"] == b"nosniff"
    policy = sent[b"content-security-policy"].decode()
    assert "frame-ancestors 'none'" in policy
    assert "default-src 'none'" in policy
    assert sent[b"x-frame-options"] == b"DENY"
    assert sent[b"referrer-policy"] == b"no-referrer"


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


async def test_the_page_policy_runs_only_its_own_script_and_style() -> None:
    app = StatusApp(static_lb("a"), title="orders </script><script>alert(1)</script>", poll_interval=0.5)
    status, sent, body = await call_app(app, "/")
    page = body.decode()
    policy = dict(d.strip().split(" ", 1) for d in sent[b"content-security-policy"].decode().split(";"))
    [script] = re.findall(r"<script>(.*?)</script>", page, flags=re.DOTALL)
    [style] = re.findall(r"<style>(.*?)</style>", page, flags=re.DOTALL)
    assert status == 200
    assert policy["script-src"] == _hash(script)
    assert policy["style-src"] == _hash(style)
    assert policy["connect-src"] == "'self'"
    assert "unsafe" not in sent[b"content-security-policy"].decode()
    assert "alert(1)" in script  # the title is data in the one script, not a script of its own
    assert page.count("<script") == 1


# -- text from outside, as the page shows it --------------------------------------------


async def test_addresses_are_shown_without_userinfo_or_secret_query_values(clock: FakeClock) -> None:
    lb = poise.LoadBalancer(
        poise.StaticDiscovery(
            [
                poise.Endpoint("a", address=SECRET_URL),
                poise.Endpoint("b", address=("db:hunter2@10.0.0.2", 5432)),
                poise.Endpoint("c", address="10.0.0.3:80"),
            ]
        ),
        clock=clock,
    )
    app = StatusApp(lb)
    async with lb:
        status, _, body = await call_app(app)
    assert status == 200
    assert b"s3cr3t" not in body
    assert b"k3y-value" not in body
    assert b"hunter2" not in body
    a, b, c = json.loads(body)["balancers"][0]["endpoints"]
    assert a["address"] == SHOWN_URL
    assert b["address"] == ["***@10.0.0.2", 5432]
    assert c["address"] == "10.0.0.3:80"


async def test_a_huge_id_and_zone_are_shown_bounded_with_their_length(clock: FakeClock) -> None:
    huge = "e" * 200_000
    lb = poise.LoadBalancer(
        poise.StaticDiscovery([poise.Endpoint(huge, zone="z" * 300_000), poise.Endpoint("b")]),
        clock=clock,
        circuit=TRIP_AT_ONCE,
    )
    app = StatusApp(lb)
    async with lb:
        permit = lb.acquire(exclude=["b"])
        async with permit:
            permit.fail(poise.Fault.FATAL)  # events about the huge id
        status, _, body = await call_app(app)
    assert status == 200
    assert len(body) < 20_000
    [b] = json.loads(body)["balancers"]
    shown = b["endpoints"][0]
    assert shown["id"] == "e" * 500 + "… (200000 characters)"
    assert shown["zone"] == "z" * 500 + "… (300000 characters)"
    assert b["events"]
    assert all(e["endpoint"] in {None, shown["id"]} for e in b["events"])


async def test_a_long_list_in_an_event_is_shown_bounded_with_its_count(clock: FakeClock) -> None:
    lb = static_lb(*(f"e{i}" for i in range(1000)), clock=clock)
    app = StatusApp(lb)
    async with lb:  # one DiscoveryApplied that added the thousand
        status, _, body = await call_app(app)
    assert status == 200
    [applied] = [e for e in json.loads(body)["balancers"][0]["events"] if e["type"] == "DiscoveryApplied"]
    added = applied["fields"]["added"]
    assert added[:2] == ["e0", "e1"]
    assert len(added) == 101
    assert added[-1] == "… (1000 items)"


# -- poll_interval -----------------------------------------------------------------------


@pytest.mark.parametrize("seconds", [1e-9, 0.001, 0.09, 86_401.0, 1e9])
def test_poll_interval_outside_a_tenth_of_a_second_to_a_day_names_the_field(seconds: float) -> None:
    with pytest.raises(poise.ConfigError) as info:
        StatusApp(static_lb("a"), poll_interval=seconds)
    assert info.value.knob == "poll_interval"


@pytest.mark.parametrize("seconds", [0.1, 86_400.0])
async def test_poll_interval_at_its_bounds_is_accepted(seconds: float) -> None:
    app = StatusApp(static_lb("a"), poll_interval=seconds)
    page = (await call_app(app, "/"))[2].decode()
    assert f"const POLL_MS = {round(seconds * 1000)};" in page
