"""The Python package's figures, side by side in one run.

    python python/bench/bench.py [--seconds S] [--records N] [--rtloop-bin PATH] [--mjlib DIR] [--json]

Runs each benchmark of this directory and prints one table:

* ``bench_robot``: ``Robot.cycle()`` on the 12-servo simulated robot without wire time, and the
  same robot over fdcanusb ptys through ``rtloop.Robot`` vs the moteus package's
  ``Transport.cycle()``;
* ``bench_moteus``: the moteus package's own transport vs the same moteus code routed
  through rtloop's transport;
* ``bench_agent``: the agent round trip from Python (state published → command seen);
* ``bench_gym``: ``rtloop/Quadruped-v0`` in simulated s per wall s beside the spine alone,
  under load, two at once, idle, and ``Ant-v5`` (needs gymnasium and an rtloop built with
  physics);
* ``bench_tlog``: ``rtloop.tlog`` reading a 1 M-record log vs mjlib's Python reader (with
  ``--mjlib DIR`` or ``RTLOOP_MJLIB``: a directory holding ``mjlib/telemetry/file_reader.py``).

A benchmark, not a test: nothing here passes or fails, it measures this machine now. Each
part is also runnable alone (``python python/bench/bench_robot.py --help``).
"""

import argparse
import contextlib
import io
import json
import os
import sys
import time
from typing import Callable, Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _parts(args: argparse.Namespace) -> Dict[str, Callable[[], List[dict]]]:
    """Each part's ``main`` with the options it takes, by name."""
    common = ["--rtloop-bin", args.rtloop_bin] if args.rtloop_bin else []
    seconds = ["--seconds", str(args.seconds)]

    def robot() -> List[dict]:
        import bench_robot

        return bench_robot.main(seconds + common)

    def moteus() -> List[dict]:
        import bench_moteus

        return bench_moteus.main(seconds + ["--quiet"])

    def agent() -> List[dict]:
        import bench_agent

        return bench_agent.main(seconds + common)

    def gym() -> List[dict]:
        import bench_gym

        return bench_gym.main(seconds + common)

    def tlog() -> List[dict]:
        import bench_tlog

        mjlib = ["--mjlib", args.mjlib] if args.mjlib else []
        return bench_tlog.main(["--records", str(args.records)] + common + mjlib)

    return {"robot": robot, "moteus": moteus, "agent": agent, "gym": gym, "tlog": tlog}


def main(argv: Optional[List[str]] = None) -> List[dict]:
    """Run the parts asked for (all by default); print and return their rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per timed measurement (default 2)")
    parser.add_argument("--records", type=int, default=1_000_000, help="records in the TLOG benchmark's log (default 1000000)")
    parser.add_argument("--rtloop-bin", default=None, help="the rtloop program (default: $RTLOOP_BIN, PATH, target/)")
    parser.add_argument("--mjlib", default=None, help="directory holding mjlib/telemetry/file_reader.py (default: $RTLOOP_MJLIB)")
    parser.add_argument("--only", default=None, help="comma-separated parts to run: robot,moteus,agent,gym,tlog")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines instead of a table")
    args = parser.parse_args(argv)
    parts = _parts(args)
    chosen = args.only.split(",") if args.only else list(parts)
    unknown = [p for p in chosen if p not in parts]
    if unknown:
        parser.error(f"unknown part {unknown[0]!r}: choose from {', '.join(parts)}")
    rows: List[dict] = []
    for name in chosen:
        started = time.monotonic()
        # Each part prints its own table when run alone; here only the combined one.
        with contextlib.redirect_stdout(io.StringIO()):
            part_rows = parts[name]()
        for row in part_rows:
            rows.append({"part": name, **row})
        print(f"[{name}: {time.monotonic() - started:.0f} s]", file=sys.stderr)
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        width = max((len(r["what"]) for r in rows), default=10)
        for row in rows:
            value = row["value"]
            shown = f"{value:,.1f}" if isinstance(value, float) else str(value)
            print(f"{row['part']:7} {row['what']:<{width}}  {shown:>14} {row['unit']:<10} {row.get('detail', '')}")
    return rows


if __name__ == "__main__":
    main()
