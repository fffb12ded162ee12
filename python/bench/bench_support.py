"""What the benchmark scripts share: finding the ``rtloop`` program and stopping the helper
processes they start. Importable as ``bench_support`` because every script runs from (or
imports with) this folder on ``sys.path``, as ``bench.py`` imports the scripts themselves.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Optional

from rtloop.program import find_program

REPO = pathlib.Path(__file__).resolve().parents[2]


def find_rtloop_bin(given: Optional[str] = None) -> Optional[str]:
    """The ``rtloop`` program (:func:`rtloop.program.find_program`, from the workspace);
    None when there is none."""
    try:
        return find_program(given, start=REPO)
    except FileNotFoundError:
        return None


def print_rows(rows) -> None:
    """A script's result rows: one JSON object per line with ``--json``, else a table."""
    if "--json" in sys.argv[1:]:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
    else:
        width = max(len(r["what"]) for r in rows)
        for row in rows:
            print(f"{row['what']:<{width}}  {row['value']:>10.2f} {row['unit']:<8} {row['detail']}")


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
