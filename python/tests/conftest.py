"""Shared fixtures. The tests run against the installed ``rtloop`` package
(``pip install ./python``); ``RTLOOP_BIN`` names the ``rtloop`` command-line program
(the Rust test harness sets it; otherwise ``rtloop`` on PATH or target/{debug,release})."""

import pathlib

import pytest

from rtloop.program import find_program

REPO = pathlib.Path(__file__).resolve().parents[2]


def _find_rtloop_bin():
    try:
        return find_program(start=REPO)
    except FileNotFoundError:
        return None


@pytest.fixture(scope="session")
def rtloop_bin():
    """Path of the ``rtloop`` program; the test fails (not skips) when it cannot be found."""
    path = _find_rtloop_bin()
    assert path, "set RTLOOP_BIN to the rtloop program (cargo build -p rtloop-cli), or put rtloop on PATH"
    return path
