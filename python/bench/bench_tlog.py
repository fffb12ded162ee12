"""How fast ``rtloop.tlog`` loads a log, against mjlib's pure-Python reader.

Usage::

    python python/bench/bench_tlog.py [--records N] [--rtloop-bin PATH] [--mjlib DIR] [--json]

Makes a real rtloop log of about N ``cycle`` records once (``rtloop run --lockstep``, 1 kHz
of simulated time, so N/1000 simulated seconds; about 100 s of CPU for the default million)
and keeps it in a temporary directory keyed by N, then times:

* ``rtloop.tlog.open(p).read("cycle")`` -- every record into numpy columns (records/s);
* the same with ``fields=`` selecting 12 columns, and ``to_pandas``;
* mjlib's ``mjlib/telemetry/file_reader.py`` reading every item of the same record into
  Python values (``--mjlib DIR`` or env ``RTLOOP_MJLIB`` naming a directory holding
  ``mjlib/telemetry/file_reader.py``; it needs ``python-snappy``), and the speed-up (target:
  10x or more), after checking the two agree on a sample of values.

Wall-clock times on a shared machine vary; each rtloop figure is the best of ``--repeat`` runs.
Importable: ``main(argv) -> list[dict]`` with rows ``{"what", "value", "unit", "detail"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

import rtloop.tlog

REPO = pathlib.Path(__file__).resolve().parents[2]

Row = Dict[str, Any]


def row(what: str, value: Any, unit: str, detail: str = "") -> Row:
    """One result row."""
    return {"what": what, "value": value, "unit": unit, "detail": detail}


def find_rtloop(given: Optional[str]) -> str:
    """The rtloop program: --rtloop-bin, env RTLOOP_BIN, PATH, or target/{release,debug}."""
    candidates = [given, os.environ.get("RTLOOP_BIN"), shutil.which("rtloop")]
    candidates += [str(REPO / "target" / profile / "rtloop") for profile in ("release", "debug")]
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit("bench_tlog: no rtloop program; give --rtloop-bin PATH or build it (cargo build --release -p rtloop-cli)")


def make_log(records: int, rtloop_bin: str) -> Tuple[pathlib.Path, float]:
    """A real ``rtloop run --lockstep`` log of about `records` cycles, made once and kept in
    a temporary directory keyed by the count; returns its path and the seconds it took to
    make (0 when it was cached)."""
    cache = pathlib.Path(tempfile.gettempdir()) / "rtloop-bench-tlog"
    cache.mkdir(exist_ok=True)
    path = cache / f"cycle-{records}.tlog"
    if path.exists():
        try:
            with rtloop.tlog.open(path) as log:
                # The writer may drop a few cycles of a lockstep run (it counts them in the
                # log's rtloop_log_stats record), so "about N" is what a complete log holds.
                if log.damage.ok and log.records().get("cycle", 0) >= 0.99 * records:
                    return path, 0.0
        except (OSError, ValueError):
            pass
        path.unlink()
    # Written beside and renamed into place: an interrupted run leaves no half log behind.
    partial = cache / f"cycle-{records}.{os.getpid()}.partial.tlog"
    started = time.perf_counter()
    try:
        subprocess.run(
            [rtloop_bin, "run", "--lockstep", "--duration", f"{records / 1000:.3f}", "--log", str(partial), "-q"],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=3600,
        )
        if not partial.exists():
            raise SystemExit(f"bench_tlog: rtloop run did not write {partial}")
        partial.rename(path)
    finally:
        if partial.exists():
            partial.unlink()
    return path, time.perf_counter() - started


def best_of(repeat: int, fn: Callable[[], Any]) -> Tuple[float, Any]:
    """The shortest wall-clock time of `repeat` calls, and the last result."""
    best, result = float("inf"), None
    for _ in range(max(1, repeat)):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def load_mjlib(directory: Optional[str]) -> Tuple[Optional[Any], str]:
    """mjlib's file_reader module, or None and why not."""
    directory = directory or os.environ.get("RTLOOP_MJLIB")
    if not directory:
        return None, "skipped: give --mjlib DIR (or set RTLOOP_MJLIB) naming a directory with mjlib/telemetry/file_reader.py"
    if not (pathlib.Path(directory) / "mjlib" / "telemetry" / "file_reader.py").is_file():
        return None, f"skipped: {directory} has no mjlib/telemetry/file_reader.py"
    try:
        import snappy  # noqa: F401  (mjlib's reader imports it)
    except ImportError:
        return None, "skipped: mjlib's reader needs python-snappy (pip install python-snappy)"
    sys.path.insert(0, directory)
    try:
        from mjlib.telemetry import file_reader
    finally:
        sys.path.remove(directory)
    return file_reader, f"mjlib from {directory}"


def check_agreement(columns: Dict[str, np.ndarray], mjlib_items: List[Any]) -> int:
    """Compare mjlib's values with ours on a sample of items; returns the values compared.
    Raises AssertionError naming the first difference."""
    assert len(mjlib_items) == len(columns["timestamp"]), "item counts differ"
    compared = 0
    step = max(1, len(mjlib_items) // 97)
    for i in range(0, len(mjlib_items), step):
        item = mjlib_items[i]
        assert item.timestamp == columns["timestamp"][i], f"item {i}: timestamp"
        assert item.data.index == columns["index"][i], f"item {i}: index"
        compared += 2
        for s, servo in enumerate(item.data.servo):
            for field in ("position", "velocity", "torque"):
                assert getattr(servo, field) == float(columns[f"servo.{s}.{field}"][i]), f"item {i}: servo.{s}.{field}"
                compared += 1
    return compared


def main(argv: Optional[List[str]] = None) -> List[Row]:
    """Run the benchmark; print a table (or JSON rows with --json) and return the rows."""
    parser = argparse.ArgumentParser(description="rtloop.tlog load speed vs mjlib's Python reader")
    parser.add_argument("--records", type=int, default=1_000_000, help="cycle records in the log (default 1000000)")
    parser.add_argument("--rtloop-bin", help="the rtloop program (default: RTLOOP_BIN, PATH, target/release)")
    parser.add_argument("--mjlib", help="directory holding mjlib/telemetry/file_reader.py (default: RTLOOP_MJLIB)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per rtloop figure, the best kept (default 3)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines")
    args = parser.parse_args(argv)
    if not 1000 <= args.records <= 100_000_000:
        parser.error("--records must be between 1000 and 100000000")

    rows: List[Row] = []
    path, made_in = make_log(args.records, find_rtloop(args.rtloop_bin))
    with rtloop.tlog.open(path) as log:
        n = log.records()["cycle"]
        rows.append(row("log", n, "cycle records", f"{path} ({log.size / 1e6:.0f} MB)" + (f", made in {made_in:.0f} s" if made_in else ", cached")))
    elapsed, columns = best_of(args.repeat, lambda: rtloop.tlog.open(path).read("cycle"))
    rows.append(row("rtloop.tlog read", round(n / elapsed), "records/s", f"{elapsed:.3f} s for {n} records x {len(columns) - 1} columns"))
    ours = n / elapsed
    subset, _ = best_of(args.repeat, lambda: rtloop.tlog.open(path).read("cycle", fields=["servo.*.position"]))
    rows.append(row("rtloop.tlog read, 12 columns", round(n / subset), "records/s", f"{subset:.3f} s (fields=['servo.*.position'])"))
    try:
        import pandas  # noqa: F401

        frame, _ = best_of(args.repeat, lambda: rtloop.tlog.open(path).to_pandas("cycle"))
        rows.append(row("rtloop.tlog to_pandas", round(n / frame), "records/s", f"{frame:.3f} s"))
    except ImportError:
        rows.append(row("rtloop.tlog to_pandas", None, "records/s", "skipped: pandas is not installed"))

    file_reader, why = load_mjlib(args.mjlib)
    if file_reader is None:
        rows.append(row("mjlib file_reader.py", None, "records/s", why))
        rows.append(row("speed-up", None, "x", why))
    else:
        started = time.perf_counter()
        items = list(file_reader.FileReader(str(path)).items(["cycle"]))
        theirs_elapsed = time.perf_counter() - started
        theirs = len(items) / theirs_elapsed
        rows.append(row("mjlib file_reader.py", round(theirs), "records/s", f"{theirs_elapsed:.1f} s, every item into Python values"))
        try:
            compared = check_agreement(columns, items)
            rows.append(row("agreement", compared, "values", "equal on a sample of ~100 items (timestamps, index, servo state)"))
        except AssertionError as e:
            rows.append(row("agreement", 0, "values", f"DIFFER: {e}"))
        rows.append(row("speed-up", round(ours / theirs, 1), "x", "rtloop.tlog read vs mjlib (target >= 10x)"))

    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        for r in rows:
            value = "-" if r["value"] is None else f"{r['value']:,}" if isinstance(r["value"], int) else r["value"]
            print(f"{r['what']:<30} {value:>14} {r['unit']:<14} {r['detail']}")
    return rows


if __name__ == "__main__":
    main()
