"""Finding the ``rtloop`` command-line program, for whatever starts it from Python (the Gymnasium
environment's spine, the tests, the benchmarks): one search order everywhere.
"""

from __future__ import annotations

import os
import pathlib
import shutil
from typing import Optional, Union

__all__ = ["find_program"]


def find_program(program: Optional[str] = None, start: Union[str, os.PathLike, None] = None) -> str:
    """The ``rtloop`` program to start: ``program`` if given, else ``$RTLOOP_BIN``, else
    ``rtloop`` on ``PATH``, else ``target/release/rtloop`` or ``target/debug/rtloop`` in
    ``start`` (the current directory by default) or one of its parents.

    Raises:
        FileNotFoundError: none of them exists (the message says how to get one).
    """
    for candidate in (program, os.environ.get("RTLOOP_BIN"), shutil.which("rtloop")):
        if candidate:
            return candidate
    here = pathlib.Path(start if start is not None else os.getcwd()).resolve()
    for d in (here, *here.parents):
        for profile in ("release", "debug"):
            candidate = d / "target" / profile / "rtloop"
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
    raise FileNotFoundError(
        "cannot find the rtloop program: set RTLOOP_BIN, put rtloop on PATH, or build it with "
        "tools/mujoco, then cargo build --release -p rtloop-cli --features physics"
    )
