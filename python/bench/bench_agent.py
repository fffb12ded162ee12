"""The agent round trip from Python: the spine publishes a state, a Python ``rtloop.Agent``
wakes up, gets the state and writes its command.

    python python/bench/bench_agent.py [--rtloop-bin PATH] [--seconds S] [--json]

Importable: ``main(argv=None) -> list[dict]`` returns rows ``{"what", "value", "unit",
"detail"}`` (and prints them when run as a script).

What is measured, and how (the spine stamps every state it publishes with CLOCK_MONOTONIC,
``state.stamp_ns``; Python's ``time.monotonic_ns()`` reads the same clock):

* **round trip** = ``time.monotonic_ns()`` right after ``Agent.command()`` returned minus
  the state's ``stamp_ns``: publish → the agent notices it → the state is copied out and
  wrapped → the command is checked and written (seqlock). The spine *sees* the command at
  its next look: in lockstep it is spinning on the command block (well under a
  microsecond later, so the figure is the round trip to the spine within that); free-running,
  the spine looks once per cycle, so it applies the command at its next cycle, and the
  figure says how much of the period the agent used.
* **lockstep cycle** = the difference of consecutive ``stamp_ns``: the whole step,
  agent round trip plus the spine's own work (simulated buses without wire time).
* **fresh commands** = the spine's own count (its ``--json`` summary: ``agent.
  commands_applied`` / ``cycles``): the share of free-running cycles that had a new
  command from the agent.

The spine runs on CPU 0 (``--cpu 0``) and this process on CPU 1 when there are two.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time
from typing import Any, Optional

import numpy as np

import rtloop

import bench_support
from bench_support import stop

HOLD: dict[str, Any] = dict(position=0.0, velocity=0.0, kp_scale=1.0, kd_scale=1.0, watchdog_timeout=0.1)
# States left out at the start of each run (attaching, arming, caches warming up).
WARMUP = 50


def run_one(bin_path: str, spine_args: list[str], busy_poll: Optional[bool], pin: bool) -> dict[str, Any]:
    """One spine run with a Python agent holding the stand pose; the samples and the summary."""
    name = f"bench{os.getpid()}-{time.monotonic_ns() % 1_000_000}"
    cmd = [bin_path, "run", "--quiet", "--json", "--agent", name, *spine_args]
    if pin:
        cmd += ["--cpu", "0"]
    spine = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    round_trip, wake, stamps = [], [], []
    try:
        with rtloop.Agent(name, busy_poll=busy_poll) as agent:
            command, clock = agent.command, time.monotonic_ns
            for state in agent:
                woke = clock()
                command(**HOLD)
                done = clock()
                stamp = state.stamp_ns
                round_trip.append(done - stamp)
                wake.append(woke - stamp)
                stamps.append(stamp)
        out, err = spine.communicate(timeout=120)
    finally:
        # Normally the spine has ended; otherwise stop it as Ctrl-C would (it removes its
        # segment), and as a last resort kill it and remove what it left.
        stop(spine)
        pathlib.Path(f"/dev/shm/rtloop-{name}").unlink(missing_ok=True)
    # Short runs on a loaded machine may see few states: never leave out more than a fifth.
    skip = min(WARMUP, len(round_trip) // 5)
    lines = out.strip().splitlines()
    if not lines:
        raise RuntimeError(f"the spine printed no summary (exit {spine.returncode}): {err.strip()}")
    return {
        "round_trip_us": np.array(round_trip[skip:], dtype=float) / 1e3,
        "wake_us": np.array(wake[skip:], dtype=float) / 1e3,
        "cycle_us": np.diff(np.array(stamps[skip:], dtype=float)) / 1e3,
        "summary": json.loads(lines[-1]),
    }


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else float("nan")


def main(argv: Optional[list[str]] = None) -> list[dict[str, Any]]:
    """Run the measurements; return (and, as a script, print) the rows."""
    args, bin_path = bench_support.spine_bench_args(__doc__, argv, "wall seconds per free-running measurement (default 2)")
    seconds = f"{args.seconds:g}"
    pin = not args.no_pin and (os.cpu_count() or 1) >= 2 and hasattr(os, "sched_setaffinity")
    saved = os.sched_getaffinity(0) if pin else None
    if pin:
        os.sched_setaffinity(0, {1})
    rows: list[dict[str, Any]] = []
    try:
        # Lockstep: simulated time, each cycle waits for the agent; 1000 cycles per simulated
        # second, so ask for a few simulated seconds per wall second the agent gets.
        lock = run_one(bin_path, ["--lockstep", "--no-wire-time", "--duration", f"{args.seconds * 5:g}"], None, pin)
        s = lock["summary"]
        # From the stamps (the spine's wall_s also counts its wait for the agent to attach).
        cycle_us = lock["cycle_us"]
        steps_per_s = 1e6 / float(cycle_us.mean()) if cycle_us.size else float("nan")
        detail = (
            "lockstep, agent busy-polling: publish (state.stamp_ns) → command written "
            f"(monotonic_ns after Agent.command returned); the spine spins on the command block, "
            f"so it sees it within ~1 µs more. Of it, publish → wait_next returned: p50 "
            f"{_pct(lock['wake_us'], 50):.1f} µs. {lock['round_trip_us'].size} cycles"
        )
        rows.append(
            dict(
                what="agent round trip p50 (lockstep)", value=_pct(lock["round_trip_us"], 50), unit="µs", detail=detail
            )
        )
        rows.append(
            dict(
                what="agent round trip p99 (lockstep)", value=_pct(lock["round_trip_us"], 99), unit="µs", detail=detail
            )
        )
        detail = (
            "consecutive state stamps in lockstep: the agent round trip plus the spine's own step "
            "(12 simulated servos, no wire time)"
        )
        rows.append(dict(what="lockstep cycle p50", value=_pct(lock["cycle_us"], 50), unit="µs", detail=detail))
        rows.append(dict(what="lockstep cycle p99", value=_pct(lock["cycle_us"], 99), unit="µs", detail=detail))
        rows.append(
            dict(
                what="lockstep steps/s",
                value=float(steps_per_s),
                unit="steps/s",
                detail=f"{cycle_us.size} steps between the first and last state stamps after the first ones; "
                f"spine summary: {s['cycles']} cycles, {s['agent']['commands_applied']} with the agent's command, "
                f"{s['agent']['cycles_without_command']} without",
            )
        )
        # Free-running at 1 kHz: sleeping 20 µs between looks (the default), then spinning.
        for busy, label in ((False, "sleeping 20 µs between looks"), (True, "busy-polling")):
            free = run_one(bin_path, ["--duration", seconds], busy, pin)
            a, cycles = free["summary"]["agent"], free["summary"]["cycles"]
            detail = (
                f"free-running 1 kHz spine, agent {label}: publish → command written "
                f"(the spine applies it at its next cycle). Of it, publish → wait_next returned: "
                f"p50 {_pct(free['wake_us'], 50):.1f} µs. {free['round_trip_us'].size} states"
            )
            what = "busy" if busy else "sleeping"
            for q in (50, 99):
                rows.append(
                    dict(
                        what=f"agent round trip p{q} (free-running, {what})",
                        value=_pct(free["round_trip_us"], q),
                        unit="µs",
                        detail=detail,
                    )
                )
            rows.append(
                dict(
                    what=f"cycles with a fresh command (free-running, {what})",
                    value=100.0 * a["commands_applied"] / max(cycles, 1),
                    unit="%",
                    detail=f"spine summary: agent.commands_applied {a['commands_applied']} of {cycles} cycles "
                    f"(achieved {free['summary']['rate_hz']:.0f} Hz), refused {a['refused']}, timeouts {a['timeouts']}",
                )
            )
    finally:
        if saved is not None:
            os.sched_setaffinity(0, saved)
    return rows


if __name__ == "__main__":
    bench_support.print_rows(main())
