"""A TLOG0003 log (from ``rtloop run --log``, or mjlib's) becomes a pandas DataFrame in one call.

Usage::

    rtloop run --lockstep --duration 2 --log run.tlog
    python python/examples/log_to_pandas.py run.tlog            # the `cycle` record
    python python/examples/log_to_pandas.py run.tlog event      # another record

Prints the log's records, what the log lost (if anything), and ``df.describe()`` of a few
columns (positions in revolutions, velocities in rev/s, torques in N·m, times in seconds).
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

import rtloop.tlog


def pick_columns(columns: List[str], limit: int = 6) -> List[str]:
    """A few interesting columns: servo 0's position/velocity/torque and cycle time when
    present (rtloop's `cycle` record), else the first numeric-looking ones."""
    preferred = ["cycle_us", "servo.0.position", "servo.0.velocity", "servo.0.torque", "imu.rate_dps.2"]
    chosen = [c for c in preferred if c in columns]
    return chosen or [c for c in columns if c != "timestamp"][:limit]


def main(argv: Optional[List[str]] = None) -> int:
    """Run the example; returns the exit status (0, or 2 when the log cannot be read)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("log", help="the TLOG0003 file")
    parser.add_argument("record", nargs="?", default="cycle", help="the record to load (default: cycle)")
    args = parser.parse_args(argv)
    try:
        with rtloop.tlog.open(args.log) as log:
            print(f"{log.path}: {log.size} bytes, records {log.records()}")
            if not log.damage.ok:
                print(f"damage: {log.damage}")
            df = log.to_pandas(args.record)  # the one call; the index is UTC time
    except (OSError, KeyError, ValueError, ImportError) as e:
        print(f"log_to_pandas: {e}", file=sys.stderr)
        return 2
    print(f"'{args.record}': {len(df)} rows x {len(df.columns)} columns, {df.index.min()} .. {df.index.max()}")
    print(df[pick_columns(list(df.columns))].describe().to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
