"""The package imports, says its version, and ships its type information."""

import pathlib

import pytest

import rtloop


def test_version_is_the_crates():
    assert rtloop.__version__.count(".") == 2


def test_typed_package():
    root = pathlib.Path(rtloop.__file__).parent
    assert (root / "py.typed").exists()
    assert (root / "_rtloop.pyi").exists()


def test_the_python_side_runs_on_the_oldest_python_the_wheel_claims():
    """The wheel is abi3 for CPython >= 3.9, so the pure-Python side must not use newer
    syntax or library calls; vermin reads the sources (annotations included)."""
    import subprocess
    import sys

    pytest.importorskip("vermin", reason="pip install vermin to check the minimum Python version")
    # vermin is a command (no `python -m vermin`): the one installed beside this Python.
    program = pathlib.Path(sys.executable).parent / "vermin"
    root = pathlib.Path(rtloop.__file__).parent
    examples = pathlib.Path(__file__).resolve().parents[1] / "examples"
    ran = subprocess.run(
        [str(program), "--no-tips", "--eval-annotations", "-t=3.9-", "--violations", str(root), str(examples)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
