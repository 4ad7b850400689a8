"""Text from outside is redacted and bounded wherever it is echoed: log lines, events, the status page.

Endpoint ids, addresses, a storage's values and errors raised by other code come from
outside the process. A 4 MB value or a 200 KB id must not make a 4 MB log line, event or
status page; ``user:pass@`` and ``?api_key=...`` must not be shown at all.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

import poise_py as poise
from poise_py._coordination._protocol import Changes, OpenWait, ProbeReport, Reply, SharedState
from poise_py._redact import MARK, TEXT_LIMIT, redact, shown, shown_error
from poise_py.contrib.status import StatusApp
from tests.support.clocks import TRIP_AT_ONCE, FakeClock, endpoints, static_lb
from tests.support.coordination import COREDIS_LEAK, RedisFleet, poison_redis
from tests.support.events import drain
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
MB4 = 4_000_000
PASSWORD = "hunter2"  # noqa: S105 - a made-up secret that must never be shown
"""A password the tests put in addresses and messages (here, so no traceback's source line quotes it)."""
LINE = 2 * TEXT_LIMIT + 400
"""Longer than any line, event text or field that shows one or two pieces of outside text."""


# -- the helper ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "https://svc:s3cr3t-pass@host/?api_key=k&region=eu",
            f"https://{MARK}@host/?api_key={MARK}&region=eu",
        ),
        ("redis://:hunter2@10.0.0.1:6379/0", f"redis://{MARK}@10.0.0.1:6379/0"),
        ("redis://user:p@ss@10.0.0.1:6379", f"redis://{MARK}@10.0.0.1:6379"),
        ("svc:hunter2@10.0.0.1:80", f"{MARK}@10.0.0.1:80"),
        (
            "GET 'http://u:p@h/x?token=t#access_token=a' answered 503",
            f"GET 'http://{MARK}@h/x?token={MARK}#access_token={MARK}' answered 503",
        ),
        (
            "/b/k?X-Amz-Credential=AK&X-Amz-Signature=ff&X-Amz-Date=1&sessionToken=s&clientSecret=c",
            f"/b/k?X-Amz-Credential={MARK}&X-Amz-Signature={MARK}&X-Amz-Date=1&sessionToken={MARK}&clientSecret={MARK}",
        ),
        (
            "?password=1&passwd=2&pwd=3&auth=4&sig=5&apikey=6&key=7",
            "?password=***&passwd=***&pwd=***&auth=***&sig=***&apikey=***&key=***",
        ),
        ("?design=1&monkey=2&page=3", "?design=1&monkey=2&page=3"),
        ("alice@example.com wrote https://host/users/@alice", "alice@example.com wrote https://host/users/@alice"),
        ("endpoint 'a' circuit closed -> open", "endpoint 'a' circuit closed -> open"),
    ],
)
def test_redact_hides_userinfo_and_secret_looking_query_values_only(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_shown_cuts_to_the_limit_and_notes_the_original_length() -> None:
    assert shown("x" * TEXT_LIMIT) == "x" * TEXT_LIMIT
    assert shown("x" * 4_002_101) == "x" * TEXT_LIMIT + "… (4002101 characters)"
    # redacted before it is cut: the cut never shows the start of a secret
    cut = shown("https://user:" + "p" * 10_000 + "@host/" + "y" * 10_000)
    assert "ppp" not in cut
    assert cut.startswith(f"https://{MARK}@host/yyy")
    assert cut.endswith("… (20019 characters)")


def test_shown_is_linear_in_the_text_however_it_is_built() -> None:
    # Each of these made an earlier pattern backtrack quadratically (minutes for 4 MB).
    for text in ["=aaaa" * 800_000, "a@" + "=a:" * 1_300_000, "x://" + "a@" * 2_000_000, "?token=b&" * 450_000]:
        assert len(shown(text)) < LINE


def test_shown_error_keeps_the_type_attributes_and_traceback_and_leaves_the_original() -> None:
    huge = "e" * 200_000
    try:
        raise poise.ProbeFailed(huge, "GET https://u:hunter2@h/health answered HTTP 503")
    except poise.ProbeFailed as raised:
        original = raised
    copy = shown_error(original)
    assert type(copy) is poise.ProbeFailed
    assert copy.endpoint_id == huge  # data stays whole; only what is shown is bounded
    assert copy.__traceback__ is original.__traceback__
    assert len(str(copy)) < LINE
    assert f"({len(str(original))} characters)" in str(copy)
    assert "hunter2" in str(original)  # the original is left as it was
    small = poise.CoordinationError("nothing to hide")
    assert shown_error(small) is small


def test_a_shown_os_error_keeps_its_errno() -> None:
    original = ConnectionRefusedError(111, "Connection refused by db " + "x" * 600)
    copy = shown_error(original)
    assert type(copy) is ConnectionRefusedError
    assert copy.errno == 111
    assert len(str(copy)) < LINE


def test_shown_error_shows_the_chain_and_the_members_of_a_group() -> None:
    try:
        try:
            raise KeyError("k" * MB4)
        except KeyError as inner:
            raise poise.CoordinationError(f"redis://admin:{PASSWORD}@h failed") from inner
    except poise.CoordinationError as raised:
        original = raised
    group = ExceptionGroup("several", [original, ValueError("v" * MB4)])
    text = "".join(traceback.format_exception(shown_error(group)))
    assert len(text) < 6 * LINE
    assert PASSWORD not in text
    assert text.count(f"({MB4 + 2} characters)") == 1  # the KeyError's repr has its quotes
    assert text.count(f"({MB4} characters)") == 1


# -- log lines -------------------------------------------------------------------------


async def test_a_200_kb_endpoint_id_makes_a_bounded_log_line(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    huge = "e" * 200_000
    lb = static_lb(huge, "b", circuit=TRIP_AT_ONCE, clock=clock)
    stream = lb.events()
    with caplog.at_level(logging.DEBUG, logger="poise_py"):
        async with lb:
            permit = lb.acquire(exclude=["b"])
            async with permit:
                permit.fail(poise.Fault.FATAL)
            events = await drain(stream)
    lines = [r.getMessage() for r in caplog.records if "circuit closed -> open" in r.getMessage()]
    assert len(lines) == 1
    assert len(lines[0]) < LINE
    assert "(200000 characters)" in lines[0]
    assert all(len(r.getMessage()) < LINE for r in caplog.records)
    opened = [e for e in events if isinstance(e, poise.CircuitOpened)]
    assert opened[0].endpoint_id == huge  # the event's id is the key a program matches on: whole


async def test_an_id_that_is_an_address_with_credentials_is_logged_redacted(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "https://svc:s3cr3t-pass@api.example.com/?api_key=k3y-value"  # noqa: S105 - made up, never shown
    lb = static_lb(secret, "b", circuit=TRIP_AT_ONCE, clock=clock)
    with caplog.at_level(logging.DEBUG, logger="poise_py"):
        async with lb:
            permit = lb.acquire(exclude=["b"])
            async with permit:
                permit.fail(poise.Fault.FATAL)
    text = caplog.text
    assert "circuit closed -> open" in text
    assert "https://***@api.example.com/?api_key=***" in text
    assert "s3cr3t" not in text
    assert "k3y-value" not in text


async def test_a_logged_exception_is_shown_bounded_and_redacted(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    message = "cannot classify for redis://admin:hunter2@h " + "x" * MB4

    def classifier(exc: BaseException) -> poise.Fault:
        raise ValueError(message)

    lb = static_lb("a", classifier=classifier, clock=clock)
    with caplog.at_level(logging.ERROR, logger="poise_py"):
        async with lb:
            with pytest.raises(OSError):
                async with lb.acquire():
                    raise OSError("reset")
    [record] = [r for r in caplog.records if "classifier raised" in r.getMessage()]
    text = logging.Formatter().format(record)
    assert "Traceback" in text
    assert len(text) < 10 * LINE
    assert f"({len(message)} characters)" in text
    assert "hunter2" not in text


# -- events, logs and the status page together ---------------------------------------------


class LeakyStorage:
    """A storage whose every call fails with a 4 MB message that quotes its password."""

    url = "redis://admin:hunter2@10.0.0.1:6379/0?password=hunter2"

    def __repr__(self) -> str:
        return f"LeakyStorage({self.url!r})"

    @property
    def protocol_version(self) -> int:
        return poise.PROTOCOL_VERSION

    message = f"cannot reach {url}: the server said " + "x" * MB4

    def _fail(self) -> poise.CoordinationUnavailable:
        return poise.CoordinationUnavailable(self.message)

    async def read(self, keys: Sequence[str]) -> list[SharedState]:
        raise self._fail()

    async def changes(self, since: int, *, limit: int = 1000) -> Changes:
        raise self._fail()

    async def trip_open(self, key: str, *, expected_version: int, wait: OpenWait) -> Reply:
        raise self._fail()

    async def begin_half_open_if_elapsed(
        self, key: str, *, expected_version: int, permitted: int, lease: float
    ) -> Reply:
        raise self._fail()

    async def lease_probe(self, key: str, *, expected_version: int) -> Reply:
        raise self._fail()

    async def report_probe(self, key: str, *, expected_version: int, report: ProbeReport) -> Reply:
        raise self._fail()

    async def close(self, key: str, *, expected_version: int) -> Reply:
        raise self._fail()


def _status_json(app: StatusApp) -> str:
    return json.dumps(app.status(), allow_nan=False)


async def test_a_4_mb_storage_error_is_bounded_and_redacted_in_the_log_the_event_and_the_status_page(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    coordination = poise.Coordination(LeakyStorage(), sync_interval=3600.0, timeout=5.0)
    lb = poise.LoadBalancer(poise.StaticDiscovery(endpoints("a")), clock=clock, coordination=coordination)
    app = StatusApp(lb)
    stream = lb.events()
    with caplog.at_level(logging.WARNING, logger="poise_py"):
        async with lb:
            coordinator = lb._coordinator
            assert coordinator is not None
            await coordinator.sync(poll=True)
            page = _status_json(app)
            events = await drain(stream)
    [fallback] = [e for e in events if isinstance(e, poise.CoordinationFallback)]
    assert isinstance(fallback.error, poise.CoordinationUnavailable)
    assert len(str(fallback.error)) < LINE
    assert f"({len(LeakyStorage.message)} characters)" in str(fallback.error)
    assert len(repr(fallback)) < 2 * LINE
    [line] = [r.getMessage() for r in caplog.records if "coordination storage" in r.getMessage()]
    assert len(line) < 2 * LINE
    assert len(page) < 20_000
    assert f"({len(LeakyStorage.message)} characters)" in page
    for text in (str(fallback.error), fallback.storage, line, page):
        assert "hunter2" not in text
    assert fallback.storage == "LeakyStorage('redis://***@10.0.0.1:6379/0?password=***')"


@pytest.mark.real_clock
@pytest.mark.filterwarnings(COREDIS_LEAK)
async def test_a_4_mb_field_in_a_redis_record_is_bounded_in_the_log_the_event_and_the_status_page(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    fleet = RedisFleet(redis_server)
    async with fleet:
        lb = await fleet.balancer("a", "b")
        app = StatusApp(lb)
        stream = lb.events()
        await poison_redis(redis_server, fleet.namespace, "a", "unknown state")
        redis_server.command("HSET", f"{{{fleet.namespace}}}:circuit:a", "state", "x" * MB4)
        await fleet.advance(31.0)
        with caplog.at_level(logging.WARNING, logger="poise_py"):
            await fleet.sync(lb)
        page = _status_json(app)
        events = await drain(stream)
    [fallback] = [e for e in events if isinstance(e, poise.CoordinationFallback)]
    assert fallback.endpoint_id == "a"
    assert len(str(fallback.error)) < LINE
    [line] = [r.getMessage() for r in caplog.records if "unusable" in r.getMessage()]
    assert len(line) < 2 * LINE
    assert len(page) < 20_000
    assert "unknown state" in page


async def test_a_rejected_discovery_update_shows_its_error_bounded(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    huge = "d" * 200_000
    send, receive = anyio.create_memory_object_stream[poise.Update](10)
    lb = poise.LoadBalancer(receive, clock=clock)
    app = StatusApp(lb)
    stream = lb.events()
    with caplog.at_level(logging.WARNING, logger="poise_py"):
        async with lb, send, receive:
            await send.send(poise.Snapshot(1, endpoints("a")))
            await send.send(poise.Snapshot(2, endpoints(huge, huge)))  # one id twice: rejected
            await anyio.wait_all_tasks_blocked()
            page = _status_json(app)
            events = await drain(stream)
    [rejected] = [e for e in events if isinstance(e, poise.DiscoveryRejected)]
    assert isinstance(rejected.error, poise.DuplicateIdentity)
    assert len(str(rejected.error)) < LINE
    assert "characters)" in str(rejected.error)
    [line] = [r.getMessage() for r in caplog.records if "rejected" in r.getMessage()]
    assert len(line) < LINE
    assert len(page) < 20_000


# -- the status page's extra -----------------------------------------------------------


def test_a_status_app_without_its_extra_fails_where_it_is_built_in_one_line() -> None:
    program = (
        "import sys\nsys.modules['hypercorn'] = None\n"
        "import anyio\nimport poise_py as poise\nfrom poise_py.contrib.status import StatusApp, serve\n"
        "async def main():\n"
        "    lb = poise.LoadBalancer(poise.StaticDiscovery([poise.Endpoint('a')]))\n"
        "    app = StatusApp(lb)\n"
        "    async with lb, anyio.create_task_group() as tg:\n"
        "        await tg.start(serve, app, 0)\n"
        "anyio.run(main)\n"
    )
    result = subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "ModuleNotFoundError: poise_py.contrib.status needs: pip install 'poise_py[status]' (in a clone: pip install -e '.[status]')"
    )
    assert "ExceptionGroup" not in result.stderr
    assert "During handling" not in result.stderr


def test_any_line_of_the_poise_py_logger_shows_its_arguments_bounded(caplog: pytest.LogCaptureFixture) -> None:
    from poise_py._logs import SHOWN_TEXT

    assert SHOWN_TEXT in logging.getLogger("poise_py").filters
    with caplog.at_level(logging.ERROR, logger="poise_py"):
        logging.getLogger("poise_py").error("poise_py: %s", "y" * MB4)
    [record] = caplog.records
    assert record.getMessage() == "poise_py: " + "y" * TEXT_LIMIT + f"… ({MB4} characters)"
