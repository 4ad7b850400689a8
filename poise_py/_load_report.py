"""ORCA load reports: what a backend says about its own load, read and written in every form.

A backend that speaks ORCA (Open Request Cost Aggregation, the ``xds.data.orca.v3.OrcaLoadReport``
message gRPC's weighted round robin and Envoy's client-side weighted round robin read) attaches
a report to its answers:

- HTTP: the ``endpoint-load-metrics`` response header, its value prefixed by its form:
  ``TEXT cpu_utilization=0.3, rps_fractional=10, named_metrics.queue=4`` (as backends such as
  vLLM write it; Envoy's parser reads ``name:value`` pairs, and this one reads both),
  ``JSON {"cpu_utilization": 0.3}`` (the protobuf JSON mapping: snake_case or lowerCamelCase
  names, numbers or numeric strings) or ``BIN <base64 protobuf>``; or the older
  ``endpoint-load-metrics-bin`` header, base64 protobuf with no prefix, which wins when both
  are sent (as in Envoy);
- gRPC: the ``endpoint-load-metrics-bin`` trailing metadata (the protobuf bytes). grpcio's
  core keeps that key for itself and never hands it to a Python application, so
  :class:`poise_py.contrib.orca_grpc.OrcaInterceptor` also sends ``endpoint-load-metrics``
  in the header's form, which :func:`load_report_from_metadata` reads too.

The protobuf codec is written here by hand (varints, fixed64 doubles, map entries), so reading
a report needs no protobuf package. Fields (number, type): ``cpu_utilization`` 1 double,
``mem_utilization`` 2 double, ``rps`` 3 uint64 (deprecated: read as ``qps`` when
``rps_fractional`` is absent, never written), ``request_cost`` 4, ``utilization`` 5 (maps of
string to double), ``rps_fractional`` 6, ``eps`` 7 double, ``named_metrics`` 8 (map),
``application_utilization`` 9 double. As in proto3, 0 means "not reported".

Names this module does not know (a newer field, an unknown TEXT or JSON key) are skipped, as a
protobuf reader skips unknown fields, so a newer backend's report still reads. Input is
bounded: a value longer than :data:`MAX_VALUE_LENGTH` is refused, and so is a map of more than
:data:`MAX_METRICS` entries or a name longer than :data:`MAX_NAME_LENGTH`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import struct
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import attrs

from ._errors import ConfigError, PoiseError
from ._knobs import as_float, is_number, knob_repr
from ._redact import shown

MAX_VALUE_LENGTH = 8192
"""The longest header or trailer value read as a report, in characters (bytes for protobuf)."""
MAX_METRICS = 256
"""The most entries each map of a report (``utilization``, ``request_cost``, ``named_metrics``) holds."""
MAX_NAME_LENGTH = 256
"""The longest metric name in a map of a report."""
HEADER = "endpoint-load-metrics"
"""The HTTP response header that carries a report in any form (prefixed ``TEXT ``, ``JSON `` or ``BIN ``)."""
BINARY_HEADER = "endpoint-load-metrics-bin"
"""The gRPC trailing metadata key (protobuf bytes), also read as an HTTP header (base64)."""
ECHOED = 200
"""How many characters of a refused value an error message repeats."""


class LoadReportError(PoiseError, ValueError):
    """Raised by :meth:`LoadReport.parse` when a value is not a load report in any form.

    Also raised by :meth:`LoadReport.to_text` when a metric name cannot be written in the
    TEXT form (use JSON or BIN for such names). The message says what was wrong and repeats
    at most the first 200 characters of the value. The never-raising readers
    (:func:`load_report_from_headers`, :func:`load_report_from_metadata`) return None instead.
    """


def _number(knob: str, value: object, *, signed: bool) -> float:
    """``value`` as a finite float (>= 0 unless ``signed``), -0.0 made 0.0."""
    if not is_number(value):
        raise ConfigError(knob, f"must be a number, got {knob_repr(value):.80}")
    number = as_float(value) + 0.0  # -0.0 + 0.0 == 0.0: one zero, one encoding
    if not math.isfinite(number):
        raise ConfigError(knob, f"must be finite, got {knob_repr(value):.80}")
    if number < 0 and not signed:
        raise ConfigError(knob, f"must be >= 0, got {knob_repr(value):.80}")
    return number


def _metrics(knob: str, value: object, *, signed: bool) -> Mapping[str, float]:
    """``value`` as a read-only map of names to finite numbers (>= 0 unless ``signed``)."""
    if not isinstance(value, Mapping):
        raise ConfigError(knob, f"must be a mapping of name -> number, got {type(value).__name__}")
    if len(value) > MAX_METRICS:
        raise ConfigError(knob, f"holds {len(value)} entries, more than {MAX_METRICS}")
    out: dict[str, float] = {}
    for key, number in value.items():
        if not isinstance(key, str) or not key or len(key) > MAX_NAME_LENGTH or not _utf8(key):
            raise ConfigError(
                knob,
                f"names must be non-empty UTF-8 strings of at most {MAX_NAME_LENGTH} characters, got {key!r:.80}",
            )
        out[key] = _number(f"{knob}[{key!r:.80}]", number, signed=signed)
    return MappingProxyType(out)


def _utf8(name: str) -> bool:
    """True if ``name`` can be written as UTF-8 (no lone surrogates), as the protobuf requires."""
    try:
        name.encode()
    except UnicodeEncodeError:
        return False
    return True


_SIGNED_MAPS = frozenset({"request_cost", "named_metrics"})
"""The maps whose values are application defined, so may be negative."""


@attrs.frozen(kw_only=True)
class LoadReport:
    """One ORCA load report: a backend's utilization, rates and application metrics.

    Every value is finite; the utilizations, ``qps`` and ``eps`` are >= 0 (a utilization may
    exceed 1.0 past a soft limit). ``request_cost`` and ``named_metrics`` are application
    defined and may be negative. 0 means "not reported", as in the protobuf. A bad value
    raises :class:`~poise_py.ConfigError` naming the field.

    Attributes:
        cpu_utilization: the backend's CPU use as a fraction of what it has.
        mem_utilization: its memory use as a fraction of what it has.
        application_utilization: the application's own notion of how busy it is (gRPC's
            weighted round robin prefers it over ``cpu_utilization`` when it is set).
        qps: queries per second the backend serves (ORCA ``rps_fractional``).
        eps: errors per second it answers.
        utilization: named resource utilizations, each a fraction.
        request_cost: named costs of the one request the report came with.
        named_metrics: any other application metrics.
    """

    cpu_utilization: float = 0.0
    mem_utilization: float = 0.0
    application_utilization: float = 0.0
    qps: float = 0.0
    eps: float = 0.0
    utilization: Mapping[str, float] = attrs.field(factory=dict, hash=False)
    request_cost: Mapping[str, float] = attrs.field(factory=dict, hash=False)
    named_metrics: Mapping[str, float] = attrs.field(factory=dict, hash=False)

    def __attrs_post_init__(self) -> None:
        # Checked and normalized here, naming the field (float, -0.0 made 0.0, read-only maps).
        for field in attrs.fields(LoadReport):
            value = getattr(self, field.name)
            knob = f"LoadReport.{field.name}"
            if field.name in ("utilization", "request_cost", "named_metrics"):
                checked: object = _metrics(knob, value, signed=field.name in _SIGNED_MAPS)
            else:
                checked = _number(knob, value, signed=False)
            object.__setattr__(self, field.name, checked)

    @classmethod
    def parse(cls, value: str | bytes) -> LoadReport:
        """Read one header or trailer value, in any form.

        A ``str`` is an ``endpoint-load-metrics`` header value: ``TEXT ...``, ``JSON ...`` or
        ``BIN <base64>``. ``bytes`` are the protobuf itself, as grpc hands over the value of
        ``endpoint-load-metrics-bin`` trailing metadata.

        Raises:
            LoadReportError: the value is not a report (what was wrong is in the message).
        """
        if isinstance(value, bytes | bytearray | memoryview):
            data = bytes(value)
            if len(data) > MAX_VALUE_LENGTH:
                raise _refused(f"protobuf of {len(data)} bytes, longer than {MAX_VALUE_LENGTH}", data)
            return _from_fields(_decode_protobuf(data), data)
        if not isinstance(value, str):
            raise LoadReportError(f"a load report is a str or bytes, got {type(value).__name__}")
        if len(value) > MAX_VALUE_LENGTH:
            raise _refused(f"longer than {MAX_VALUE_LENGTH} characters", value)
        match = _PREFIX.match(value)
        if match is None:
            raise _refused("no TEXT, JSON or BIN prefix", value)
        form, body = match.group(1), value[match.end() :]
        if form == "TEXT":
            return _from_fields(_decode_text(body, value), value)
        if form == "JSON":
            return _from_fields(_decode_json(body, value), value)
        return _from_fields(_decode_protobuf(_unbase64(body, value), value), value)

    def to_text(self) -> str:
        """The TEXT form (``TEXT cpu_utilization=0.3, named_metrics.queue=4``), zeros left out.

        Raises:
            LoadReportError: a metric name holds a character the form cannot carry (anything
                but letters, digits and ``!#$%&'*+-.^_`|~``).
        """
        items = [f"{name}={value!r}" for name, value in self._scalars() if value]
        for prefix, metrics in self._maps():
            for name, value in metrics.items():
                if _TEXT_NAME.fullmatch(name) is None:
                    raise LoadReportError(f"{prefix}{name!r:.80} cannot be written in the TEXT form (use JSON or BIN)")
                items.append(f"{prefix}{name}={value!r}")
        return "TEXT " + ", ".join(items)

    def to_json(self) -> str:
        """The JSON form (``JSON {"cpu_utilization": 0.3}``), zeros and empty maps left out; ASCII only."""
        body: dict[str, Any] = {name: value for name, value in self._scalars() if value}
        for prefix, metrics in self._maps():
            if metrics:
                body[prefix[:-1]] = dict(metrics)
        return "JSON " + json.dumps(body, separators=(",", ":"), allow_nan=False)

    def to_binary(self) -> bytes:
        """The protobuf encoding (the value of gRPC's ``endpoint-load-metrics-bin`` trailer)."""
        out = bytearray()
        for number, name in _FIELDS:  # in field-number order, as protobuf's own encoders write
            value: float | Mapping[str, float] = getattr(self, name)
            if not isinstance(value, Mapping):
                if value:
                    out += _varint(number << 3 | 1) + _DOUBLE.pack(value)
                continue
            for key, metric in value.items():
                raw = key.encode()
                entry = b"\x0a" + _varint(len(raw)) + raw + b"\x11" + _DOUBLE.pack(metric)
                out += _varint(number << 3 | 2) + _varint(len(entry)) + entry
        return bytes(out)

    def to_header(self, form: str = "TEXT") -> str:
        """The ``endpoint-load-metrics`` header value in ``form``: ``"TEXT"``, ``"JSON"`` or ``"BIN"``."""
        if form == "TEXT":
            return self.to_text()
        if form == "JSON":
            return self.to_json()
        if form == "BIN":
            return "BIN " + base64.b64encode(self.to_binary()).decode("ascii")
        raise ConfigError("form", f"must be 'TEXT', 'JSON' or 'BIN', got {form!r:.80}")

    def _scalars(self) -> list[tuple[str, float]]:
        return [
            ("cpu_utilization", self.cpu_utilization),
            ("mem_utilization", self.mem_utilization),
            ("application_utilization", self.application_utilization),
            ("rps_fractional", self.qps),
            ("eps", self.eps),
        ]

    def _maps(self) -> list[tuple[str, Mapping[str, float]]]:
        return [
            ("utilization.", self.utilization),
            ("request_cost.", self.request_cost),
            ("named_metrics.", self.named_metrics),
        ]


def load_report_from_headers(headers: object) -> LoadReport | None:
    """The load report in HTTP response headers, or None if there is none or it cannot be read.

    ``headers`` is a mapping (``httpx.Headers``, a dict) or a list of ``(name, value)`` pairs
    (an ASGI or h11 header list), names in any case, as ``str`` or ``bytes``. Reads
    ``endpoint-load-metrics-bin`` (base64 protobuf) if sent, else ``endpoint-load-metrics``.
    Never raises: a malformed, oversized or unreadable report is None.
    """
    try:
        found: dict[str, str] = {}
        for name, value in _pairs(headers):
            key = _text(name).lower()
            if key in (HEADER, BINARY_HEADER) and key not in found:
                found[key] = _text(value)
        if BINARY_HEADER in found:
            raw = found[BINARY_HEADER]
            return None if len(raw) > MAX_VALUE_LENGTH else LoadReport.parse(_unbase64(raw, raw))
        if HEADER in found:
            return LoadReport.parse(found[HEADER])
    except Exception:  # noqa: BLE001 - the reader never raises: anything unreadable is no report
        return None
    return None


def load_report_from_metadata(metadata: object) -> LoadReport | None:
    """The load report in gRPC trailing metadata, or None if there is none or it cannot be read.

    ``metadata`` is what ``call.trailing_metadata()`` gives (``grpc.aio.Metadata``, or a
    sequence of ``(key, value)`` pairs), or None. The ``endpoint-load-metrics-bin`` value is
    the protobuf bytes (a ``str`` is read as base64); an ``endpoint-load-metrics`` value is read
    as the HTTP header. Never raises.
    """
    try:
        if metadata is None:
            return None
        text: str | None = None
        for key, value in _pairs(metadata):
            name = _text(key).lower()
            if name == BINARY_HEADER:
                if isinstance(value, bytes):
                    return LoadReport.parse(value)
                raw = _text(value)
                return None if len(raw) > MAX_VALUE_LENGTH else LoadReport.parse(_unbase64(raw, raw))
            if name == HEADER and text is None:
                text = _text(value)
        return None if text is None else LoadReport.parse(text)
    except Exception:  # noqa: BLE001 - the reader never raises: anything unreadable is no report
        return None


MAX_PAIRS = 1024
"""The most header or metadata pairs the readers look through."""


def _pairs(headers: object) -> Iterable[tuple[Any, Any]]:
    """``(name, value)`` pairs of a mapping (every value of a repeated name, for httpx) or a list."""
    multi = getattr(headers, "multi_items", None)
    source: Iterable[Any]
    if callable(multi):
        source = multi()
    elif isinstance(headers, Mapping):
        source = headers.items()
    elif isinstance(headers, Iterable) and not isinstance(headers, str | bytes):
        source = headers
    else:
        return []
    pairs: list[tuple[Any, Any]] = []
    for n, pair in enumerate(source):
        if n >= MAX_PAIRS:
            break
        name, value = pair
        pairs.append((name, value))
    return pairs


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("latin-1")
    raise TypeError(type(value).__name__)


# --- the forms ---------------------------------------------------------------------------------

_PREFIX = re.compile(r"(TEXT|JSON|BIN)(?:[ \t]+|$)")
_TEXT_NAME = re.compile(r"[A-Za-z0-9!#$%&'*+\-.^_`|~]+")
_DECIMAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_DOUBLE = struct.Struct("<d")
_DOUBLES = (
    (1, "cpu_utilization"),
    (2, "mem_utilization"),
    (6, "qps"),
    (7, "eps"),
    (9, "application_utilization"),
)
_MAPS = ((4, "request_cost"), (5, "utilization"), (8, "named_metrics"))
_FIELDS = sorted(_DOUBLES + _MAPS)
_SCALAR_NAMES = {
    "cpu_utilization": "cpu_utilization",
    "mem_utilization": "mem_utilization",
    "application_utilization": "application_utilization",
    "rps_fractional": "qps",
    "eps": "eps",
}
_MAP_NAMES = {"utilization": "utilization", "request_cost": "request_cost", "named_metrics": "named_metrics"}
_JSON_NAMES = {
    **{name: name for name in (*_SCALAR_NAMES, *_MAP_NAMES, "rps")},
    "cpuUtilization": "cpu_utilization",
    "memUtilization": "mem_utilization",
    "applicationUtilization": "application_utilization",
    "rpsFractional": "rps_fractional",
    "requestCost": "request_cost",
    "namedMetrics": "named_metrics",
}


class _Fields:
    """What a form's decoder found, before the report is built (and checked)."""

    __slots__ = ("maps", "rps", "scalars")

    def __init__(self) -> None:
        self.scalars: dict[str, float] = {}
        self.maps: dict[str, dict[str, float]] = {name: {} for name in _MAP_NAMES.values()}
        self.rps: float | None = None

    def put(self, field: str, key: str, value: float, whole: str | bytes) -> None:
        entries = self.maps[field]
        if key not in entries and len(entries) >= MAX_METRICS:
            raise _refused(f"more than {MAX_METRICS} {field} entries", whole)
        entries[key] = value


def _refused(problem: str, value: str | bytes) -> LoadReportError:
    echo = value[:ECHOED]
    more = "…" if len(value) > ECHOED else ""
    return LoadReportError(f"not a load report: {problem}; got {shown(repr(echo))}{more}")


def _from_fields(fields: _Fields, whole: str | bytes) -> LoadReport:
    scalars: dict[str, Any] = dict(fields.scalars)
    maps: dict[str, Any] = fields.maps
    if "qps" not in scalars and fields.rps is not None:
        scalars["qps"] = fields.rps
    try:
        return LoadReport(**scalars, **maps)
    except ConfigError as error:
        raise _refused(str(error), whole) from None


def _decode_text(body: str, whole: str) -> _Fields:
    fields = _Fields()
    seen: set[str] = set()
    for item in body.split(","):
        entry = item.strip(" \t")
        if not entry:
            continue
        cut = entry.find("=")
        if cut < 0:
            cut = entry.find(":")
        if cut < 0:
            raise _refused(f"{entry[:80]!r} is not name=value", whole)
        name, text = entry[:cut].strip(" \t"), entry[cut + 1 :].strip(" \t")
        if not name:
            raise _refused("a metric has no name", whole)
        if name in seen:
            raise _refused(f"{name[:80]!r} is given twice", whole)
        seen.add(name)
        prefix, dot, key = name.partition(".")
        mapped = bool(dot) and prefix in _MAP_NAMES
        if name not in _SCALAR_NAMES and not mapped:
            continue  # a name this reader does not know, whatever its value: a newer backend's
        if _DECIMAL.fullmatch(text) is None:
            raise _refused(f"{name[:80]!r} has {text[:80]!r}, not a decimal number", whole)
        value = float(text)
        if not math.isfinite(value):
            raise _refused(f"{name[:80]!r} is not finite", whole)
        if not mapped:
            fields.scalars[_SCALAR_NAMES[name]] = value
            continue
        if not key:
            raise _refused(f"{name[:80]!r} has an empty metric name", whole)
        fields.put(_MAP_NAMES[prefix], key, value, whole)
    return fields


def _decode_json(body: str, whole: str) -> _Fields:
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as error:
        raise _refused(f"invalid JSON ({str(error)[:80]})", whole) from None
    if not isinstance(data, dict):
        raise _refused("the JSON is not an object", whole)
    fields = _Fields()
    for raw_name, raw_value in data.items():
        name = _JSON_NAMES.get(raw_name)
        if name is None:
            continue
        if name in _MAP_NAMES:
            if not isinstance(raw_value, dict):
                raise _refused(f"{raw_name!r} is not an object", whole)
            for key, number in raw_value.items():
                fields.put(_MAP_NAMES[name], key, _json_number(f"{raw_name}.{key[:80]}", number, whole), whole)
        elif name == "rps":
            fields.rps = _json_number(raw_name, raw_value, whole)
        else:
            fields.scalars[_SCALAR_NAMES[name]] = _json_number(raw_name, raw_value, whole)
    return fields


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a report may hold")


def _json_number(name: str, value: object, whole: str) -> float:
    """A JSON number, or a string holding one (the protobuf JSON mapping allows both)."""
    if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()) is not None:
        number = float(value)
    elif is_number(value):
        try:
            number = float(value)
        except OverflowError:
            raise _refused(f"{name!r} is out of range", whole) from None
    else:
        raise _refused(f"{name!r} has {knob_repr(value):.80}, not a number", whole)
    if not math.isfinite(number):
        raise _refused(f"{name!r} is not finite", whole)
    return number


def _unbase64(body: str, whole: str) -> bytes:
    try:
        return base64.b64decode(body.strip(" \t"), validate=True)
    except (binascii.Error, ValueError):
        raise _refused("the BIN form is not base64", whole) from None


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _read_varint(data: bytes, pos: int, whole: str | bytes) -> tuple[int, int]:
    result = 0
    for shift in range(0, 70, 7):
        if pos >= len(data):
            raise _refused("the protobuf ends inside a varint", whole)
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & 0xFFFF_FFFF_FFFF_FFFF, pos
    raise _refused("a protobuf varint is longer than 10 bytes", whole)


def _read_field(data: bytes, pos: int, whole: str | bytes) -> tuple[int, int, int | bytes, int]:
    """One field at ``pos``: (number, wire type, value, next position); unknown types refused."""
    key, pos = _read_varint(data, pos, whole)
    number, wire = key >> 3, key & 7
    if number == 0:
        raise _refused("a protobuf field is numbered 0", whole)
    if wire == 0:
        value, pos = _read_varint(data, pos, whole)
        return number, wire, value, pos
    size = {1: 8, 5: 4}.get(wire)
    if size is None:
        if wire != 2:
            raise _refused(f"protobuf wire type {wire} is not one a report uses", whole)
        size, pos = _read_varint(data, pos, whole)
    if pos + size > len(data):
        raise _refused("the protobuf ends inside a field", whole)
    return number, wire, data[pos : pos + size], pos + size


def _decode_protobuf(data: bytes, whole: str | bytes | None = None) -> _Fields:
    source = data if whole is None else whole
    fields = _Fields()
    doubles = dict(_DOUBLES)
    maps = dict(_MAPS)
    pos = 0
    while pos < len(data):
        number, wire, value, pos = _read_field(data, pos, source)
        if number in doubles or number in maps or number == 3:
            expected = 1 if number in doubles else 2 if number in maps else 0
            if wire != expected:
                raise _refused(f"protobuf field {number} has wire type {wire}, not {expected}", source)
        if number in doubles:
            assert isinstance(value, bytes)  # noqa: S101 - wire type 1 is bytes
            fields.scalars[doubles[number]] = _DOUBLE.unpack(value)[0]
        elif number in maps:
            assert isinstance(value, bytes)  # noqa: S101 - wire type 2 is bytes
            key, number_value = _decode_entry(value, source)
            fields.put(maps[number], key, number_value, source)
        elif number == 3:
            assert isinstance(value, int)  # noqa: S101 - wire type 0 is an int
            fields.rps = float(value)
    return fields


def _decode_entry(entry: bytes, whole: str | bytes) -> tuple[str, float]:
    key = b""
    value = 0.0
    pos = 0
    while pos < len(entry):
        number, wire, raw, pos = _read_field(entry, pos, whole)
        if number == 1 and wire == 2:
            assert isinstance(raw, bytes)  # noqa: S101 - wire type 2 is bytes
            key = raw
        elif number == 2 and wire == 1:
            assert isinstance(raw, bytes)  # noqa: S101 - wire type 1 is bytes
            value = _DOUBLE.unpack(raw)[0]
        elif number in (1, 2):
            raise _refused(f"a map entry's field {number} has wire type {wire}", whole)
    try:
        name = key.decode("utf-8")
    except UnicodeDecodeError:
        raise _refused("a metric name is not UTF-8", whole) from None
    if not name:
        raise _refused("a metric has an empty name", whole)
    if not math.isfinite(value):
        raise _refused(f"metric {name[:80]!r} is not finite", whole)
    return name, value
