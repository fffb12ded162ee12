"""What the benchmark scripts share: finding the ``rtloop`` program and stopping the helper
processes they start. Importable as ``bench_support`` because every script runs from (or
imports with) this folder on ``sys.path``, as ``bench.py`` imports the scripts themselves.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
from typing import Optional

REPO = pathlib.Path(__file__).resolve().parents[2]


def find_rtloop_bin(given: Optional[str] = None) -> Optional[str]:
    """The ``rtloop`` program: ``given``, else ``$RTLOOP_BIN``, ``rtloop`` on PATH, or the
    workspace's target/{release,debug}; None when there is none."""
    for candidate in (given, os.environ.get("RTLOOP_BIN"), shutil.which("rtloop")):
        if candidate:
            return candidate
    for profile in ("release", "debug"):
        path = REPO / "target" / profile / "rtloop"
        if path.exists():
            return str(path)
    return None


def stop(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """End a helper process as Ctrl-C would (SIGTERM: a spine removes its segment, a
    simulator its links), SIGKILL if it is still there after ``timeout`` s; then reap it.
    A process that already ended is only reaped."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()
