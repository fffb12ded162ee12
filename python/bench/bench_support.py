"""What the benchmark scripts share: finding the ``rtloop`` program and stopping the helper
processes they start. Importable as ``bench_support`` because every script runs from (or
imports with) this folder on ``sys.path``, as ``bench.py`` imports the scripts themselves.
"""

from __future__ import annotations

import argparse
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


def spine_bench_args(doc: str, argv, seconds_help: str):
    """The command line every spine benchmark takes (``--rtloop-bin``, ``--seconds`` 0.1 to
    600, ``--json``, ``--no-pin``), checked: ``(args, the rtloop program)``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--rtloop-bin", default=None, help="the rtloop program (default: $RTLOOP_BIN, PATH, target/)")
    parser.add_argument("--seconds", type=float, default=2.0, help=seconds_help)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines")
    parser.add_argument("--no-pin", action="store_true", help="leave the spine and this process on any CPU")
    args = parser.parse_args(argv)
    bin_path = find_rtloop_bin(args.rtloop_bin)
    if not bin_path:
        parser.error("cannot find the rtloop program: pass --rtloop-bin PATH or set RTLOOP_BIN")
    if not (0.1 <= args.seconds <= 600):
        parser.error(f"--seconds {args.seconds} is out of range: give 0.1 to 600")
    return args, bin_path


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
