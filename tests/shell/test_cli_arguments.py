"""``poise``'s integer arguments: what each accepts, and the message argparse prints for the rest."""

from __future__ import annotations

import pytest

from poise_py.cli import build_parser


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["demo", "--requests", "1"], ("requests", 1)),
        (["demo", "--web", "0"], ("web", 0)),
        (["demo", "--web", "65535"], ("web", 65535)),
        (["demo", "--web"], ("web", 0)),
        (["simulate", "--jobs", "4"], ("jobs", 4)),
    ],
)
def test_an_integer_argument_in_range_is_taken(argv: list[str], parsed: tuple[str, int]) -> None:
    name, value = parsed
    assert getattr(build_parser().parse_args(argv), name) == value


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--requests", "many"], "not a number of requests: 'many'"),
        (["demo", "--requests", "0"], "at least 1 request, got 0"),
        (["simulate", "--jobs", "1.5"], "not a number of processes: '1.5'"),
        (["simulate", "--jobs", "-2"], "at least 1 process, got -2"),
        (["demo", "--web", "http"], "not a port number: 'http'"),
        (["demo", "--web", "65536"], "a port is 0..65535, got 65536"),
        (["demo", "--web", "-1"], "a port is 0..65535, got -1"),
    ],
)
def test_an_integer_argument_out_of_range_or_unreadable_is_refused_with_its_message(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.rstrip().endswith(message)
