"""The package imports, says its version, and ships its type information."""

import pathlib

import rtloop


def test_version_is_the_crates():
    assert rtloop.__version__.count(".") == 2


def test_typed_package():
    root = pathlib.Path(rtloop.__file__).parent
    assert (root / "py.typed").exists()
    assert (root / "_rtloop.pyi").exists()
