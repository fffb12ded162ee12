"""stand -- from wherever the joints are to a standing pose, then hold (rtloop from Python).

The Python twin of ``crates/rtloop/examples/stand.rs``: the simulated quadruped's joints
start at 0.05 rev (a real robot never starts at zero); every joint is measured first, then
ramped to the stand pose over one second with a smoothstep -- position *and* velocity
feed-forward, so the servos track without lag -- and held, at a fixed rate (500 Hz by
default) paced with ``time.sleep`` to absolute deadlines. Every command carries its gains,
torque limit and watchdog.

Run it: ``python python/examples/stand.py [--duration 3] [--rate 500]``.

It prints the cycles run, the missing replies, the worst tracking error once standing (about
0.015 rev: the simulated joints carry a gravity-like load and a position loop droops under
load) and the final positions; the exit status is 0 only if no servo ever went missing.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import List, Optional, Tuple

import numpy as np

import rtloop

#: The stand pose of one leg (abduction, hip, knee), rev; the quadruped has four legs.
STAND_POSE = np.array([0.0, -0.1, 0.2])

#: Seconds from the measured pose to the stand pose.
RAMP_S = 1.0

#: Every command carries these: gain scales, torque limit (N·m), watchdog (s).
KP_SCALE, KD_SCALE, MAXIMUM_TORQUE, WATCHDOG_S = 1.0, 1.0, 4.0, 0.1


def smoothstep(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The smoothstep of ``x`` clamped to 0..1, and its slope."""
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x), 6.0 * x * (1.0 - x)


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    """``--duration SECONDS`` (above 0, at most 3600) and ``--rate HZ`` (1 to 2000)."""
    parser = argparse.ArgumentParser(description="Ramp the simulated quadruped to a stand pose and hold it.")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds to run (default 3)")
    parser.add_argument("--rate", type=float, default=500.0, help="cycles per second (default 500)")
    args = parser.parse_args(argv)
    if not (0.0 < args.duration <= 3600.0):
        parser.error(f"--duration {args.duration} is out of range: give seconds above 0 and at most 3600")
    if not (1.0 <= args.rate <= 2000.0):
        parser.error(f"--rate {args.rate} is out of range: give 1 to 2000 Hz")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    """Run the stand-up and hold; return the exit status (0: no servo went missing)."""
    args = parse_args(argv)
    period = 1.0 / args.rate
    with rtloop.Robot(start_position=0.05) as robot:
        stand = np.tile(STAND_POSE, len(robot) // 3 + 1)[: len(robot)]

        # Measure where every joint is before moving any: query until all have answered.
        state = robot.query()
        for _ in range(10):
            if state.fresh.all():
                break
            state = robot.query()
        start = state.position.copy()
        if np.isnan(start).any():
            print(f"stand: servos {robot.ids[np.isnan(start)].tolist()} never answered", file=sys.stderr)
            return 1

        worst_hold: Optional[float] = None  # worst |target - measured| once standing, rev
        t0 = time.monotonic()
        deadline = t0
        cycles = 0
        while True:
            t = time.monotonic() - t0
            if t >= args.duration:
                break
            s, ds = smoothstep(np.full(len(robot), t / RAMP_S))
            target = start + (stand - start) * s
            velocity = (stand - start) * ds / RAMP_S
            state = robot.cycle(
                position=target,
                velocity=velocity,
                kp_scale=KP_SCALE,
                kd_scale=KD_SCALE,
                maximum_torque=MAXIMUM_TORQUE,
                watchdog_timeout=WATCHDOG_S,
            )
            cycles += 1
            if t > RAMP_S + 0.2:
                fresh = state.fresh
                if fresh.any():
                    error = float(np.abs(state.position[fresh] - target[fresh]).max())
                    worst_hold = error if worst_hold is None else max(worst_hold, error)
            # Absolute deadlines: a late cycle does not push every later one back; only when
            # more than a whole period behind are the lost periods skipped.
            deadline += period
            delay = deadline - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -period:
                deadline = time.monotonic()
        # End as `rtloop run` does by default: hold zero velocity (the watchdog takes over
        # once nobody commands).
        robot.zero_velocity()
        missing = robot.stats["missing"]

    print(
        f"stand: {cycles} cycles in {args.duration:.1f} s on {len(robot)} servos "
        f"({cycles / args.duration:.0f} Hz; asked {args.rate:.0f} Hz)"
    )
    print(f"stand: {missing} missing replies")
    if worst_hold is not None:
        print(f"stand: holding within {worst_hold:.4f} rev of the stand pose")
    else:
        print(f"stand: not held long enough to measure (ramp {RAMP_S} s + 0.2 s)")
    print("stand: final positions (rev): " + " ".join(f"{p:+.3f}" for p in state.position))
    return 0 if missing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
