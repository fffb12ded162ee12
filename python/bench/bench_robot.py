"""How fast ``rtloop.Robot`` cycles from Python, and against the official moteus package.

Measures:

(a) ``Robot.cycle()`` on the simulated 12-servo quadruped with ``wire_time=False`` (the wires
    take no time, so this is the cost of the host side: Python call, argument checks, the
    Rust cycle with the simulated servos, the state array): cycles per second with scalar
    arguments, with per-servo arrays, and ``query()``; plus the Rust side alone (the mean
    ``State.duration``) and what the Python side adds.
(b) The same robot behind four fdcanusb pseudo-terminals served by ``rtloop sim
    --no-wire-time`` (ids 1-3, 4-6, 7-9, 10-12): cycles per second through
    ``rtloop.Robot(buses={1: "fdcanusb:...", ...})`` and through ``moteus`` 1.1.1 doing the
    same full cycle (a position command with a query to every servo, ``Transport.cycle``
    over one ``FdcanusbDevice`` per bus), and their ratio.

Run alone: ``python python/bench/bench_robot.py [--seconds S] [--rtloop-bin PATH]``; or
import it and call :func:`main`, which returns the rows it printed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

import rtloop

from bench_support import find_rtloop_bin, stop

Row = Dict[str, object]


def row(what: str, value: float, unit: str, detail: str) -> Row:
    """One result: what was measured, its value and unit, and how."""
    return {"what": what, "value": float(value), "unit": unit, "detail": detail}


def rate(step: Callable[[], object], seconds: float) -> Tuple[float, float, int]:
    """Call ``step`` for about ``seconds`` (checking the clock every 64 calls); return
    (calls per wall-clock second, calls per CPU second of this process, calls). The second
    leaves out the time other processes took the CPU: on a shared machine it is what one
    free core would do."""
    n = 0
    start, cpu = time.perf_counter(), time.process_time()
    deadline = start + seconds
    while True:
        for _ in range(64):
            step()
        n += 64
        now = time.perf_counter()
        if now >= deadline:
            used = max(time.process_time() - cpu, 1e-9)
            return n / (now - start), n / used, n


def bench_simulated(seconds: float) -> List[Row]:
    """(a): the simulated quadruped without wire time."""
    rows: List[Row] = []
    with rtloop.Robot(wire_time=False) as robot:
        robot.cycle(position=0.0, velocity=0.0)
        hz, cpu_hz, n = rate(lambda: robot.cycle(position=0.0, velocity=0.0, maximum_torque=2.0), seconds)
        rows.append(
            row(
                "Robot.cycle(), simulated quadruped, wire_time=False",
                hz,
                "cycles/s",
                f"12 servos, scalar position/velocity/maximum_torque, {n} cycles; {cpu_hz:,.0f} per CPU second "
                "(target >= 20000)",
            )
        )
        position = np.linspace(-0.1, 0.1, len(robot))
        velocity = np.zeros(len(robot))
        hz, cpu_hz, n = rate(lambda: robot.cycle(position=position, velocity=velocity), seconds / 2)
        rows.append(
            row(
                "Robot.cycle(), per-servo arrays",
                hz,
                "cycles/s",
                f"float64 arrays of 12, {n} cycles; {cpu_hz:,.0f} per CPU second",
            )
        )
        hz, cpu_hz, n = rate(robot.query, seconds / 2)
        rows.append(row("Robot.query()", hz, "cycles/s", f"{n} cycles; {cpu_hz:,.0f} per CPU second"))
        n = 2000
        durations = np.empty(n)
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            durations[i] = robot.cycle(position=0.0, velocity=0.0, maximum_torque=2.0).duration
        wall, used = time.perf_counter() - start, time.process_time() - cpu
        # Both figures by wall clock, so that they compare (the process's share of the CPU
        # scales both alike).
        total = wall / n * 1e6
        rust = float(durations.mean() * 1e6)
        rows.append(
            row(
                "one cycle inside Rust (encode, bus cycle with simulated servos, decode)",
                rust,
                "µs",
                f"mean State.duration over {n} cycles; p99 {np.percentile(durations, 99) * 1e6:.1f} µs "
                f"(wall clock; this process had {used / wall:.0%} of a CPU)",
            )
        )
        rows.append(
            row(
                "Python side of one cycle",
                max(total - rust, 0.0),
                "µs",
                f"a whole cycle ({total:.1f} µs) minus the Rust cycle: call, argument checks, GIL release, state array",
            )
        )
    return rows


def start_sim(rtloop_bin: str, directory: str) -> Tuple["subprocess.Popen[bytes]", Dict[int, str]]:
    """``rtloop sim`` with four fdcanusb ptys (three servos each, no wire time)."""
    paths = {b: os.path.join(directory, f"bus{b}") for b in range(1, 5)}
    cmd = [rtloop_bin, "sim", "--no-wire-time"]
    for b, path in paths.items():
        cmd += ["--bus", f"{b}=fdcanusb:{path}", "--ids", f"{b}={3 * b - 2}-{3 * b}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(1000):
        if all(os.path.exists(p) for p in paths.values()) or proc.poll() is not None:
            break
        time.sleep(0.01)
    if not all(os.path.exists(p) for p in paths.values()):
        proc.kill()
        _, err = proc.communicate(timeout=5)
        raise RuntimeError(f"rtloop sim did not create its ptys: {err.decode(errors='replace').strip()}")
    return proc, paths


async def moteus_rate(paths: Dict[int, str], seconds: float) -> Tuple[float, int, int]:
    """moteus 1.1.1: one ``Transport`` over an ``FdcanusbDevice`` per bus; every cycle a
    position command with a query to each of the 12 servos. Returns (cycles/s, cycles,
    replies missing)."""
    import moteus

    devices = {b: moteus.FdcanusbDevice(p) for b, p in paths.items()}
    routing = {moteus.DeviceAddress(can_id=i): devices[(i - 1) // 3 + 1] for i in range(1, 13)}
    transport = moteus.Transport(list(devices.values()), routing_table=routing)
    try:
        controllers = [moteus.Controller(i, transport=transport) for i in range(1, 13)]

        def commands() -> List[Any]:
            """One position command with a query per servo (moteus.Command objects)."""
            return [
                c.make_position(position=0.0, velocity=0.0, watchdog_timeout=0.1, query=True) for c in controllers
            ]

        await transport.cycle(commands())
        n, missing = 0, 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds or n < 20:
            results = await transport.cycle(commands())
            missing += 12 - len(results)
            n += 1
        return n / (time.perf_counter() - start), n, missing
    finally:
        transport.close()


def bench_pty(rtloop_bin: Optional[str], seconds: float) -> List[Row]:
    """(b): four fdcanusb ptys served by ``rtloop sim``, rtloop vs moteus."""
    if rtloop_bin is None:
        return [
            row("fdcanusb ptys", float("nan"), "cycles/s", "skipped: no rtloop program (--rtloop-bin or RTLOOP_BIN)")
        ]
    rows: List[Row] = []
    with tempfile.TemporaryDirectory(prefix="rtloop-bench-") as directory:
        proc, paths = start_sim(rtloop_bin, directory)
        try:
            buses = {b: f"fdcanusb:{p}" for b, p in paths.items()}
            servos = {b: [3 * b - 2, 3 * b - 1, 3 * b] for b in paths}
            # Float commands as moteus sends them; wait for every reply as moteus does.
            with rtloop.Robot(buses=buses, servos=servos, resolution="float", timeout=0.05) as robot:
                robot.query()
                hz, _, n = rate(lambda: robot.cycle(position=0.0, velocity=0.0), seconds)
                missing = robot.stats["missing"]
            ours = row(
                "rtloop.Robot over 4 fdcanusb ptys",
                hz,
                "cycles/s",
                f"12 servos, position + query each, {n} cycles, {missing} replies missing",
            )
            rows.append(ours)
            try:
                import moteus
            except ImportError:
                rows.append(
                    row(
                        "moteus over 4 fdcanusb ptys",
                        float("nan"),
                        "cycles/s",
                        "skipped: moteus is not installed (pip install moteus==1.1.1)",
                    )
                )
                return rows
            version = getattr(moteus, "VERSION", "?")
            mhz, mn, mmissing = asyncio.run(moteus_rate(paths, seconds))
            rows.append(
                row(
                    "moteus over 4 fdcanusb ptys",
                    mhz,
                    "cycles/s",
                    f"moteus {version}, Transport.cycle of 12 make_position(query=True), {mn} cycles, "
                    f"{mmissing} replies missing",
                )
            )
            rows.append(row("rtloop / moteus", hz / mhz, "x", "same cycle, same simulator (target >= 10x)"))
        finally:
            stop(proc)
    return rows


def print_table(rows: List[Row]) -> None:
    """The rows as an aligned text table."""
    width = max(len(str(r["what"])) for r in rows)
    for r in rows:
        value = r["value"]
        shown = "n/a" if value != value else f"{value:,.1f}"  # NaN: skipped
        print(f"{str(r['what']):<{width}}  {shown:>12} {str(r['unit']):<9} {r['detail']}")


def main(argv: Optional[List[str]] = None) -> List[Row]:
    """Run the benchmarks, print the table, return the rows (``what``, ``value``, ``unit``,
    ``detail``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per measurement (default 2)")
    parser.add_argument("--rtloop-bin", default=None, help="the rtloop program (default: $RTLOOP_BIN, PATH, target/)")
    args = parser.parse_args(argv)
    if not (0.05 <= args.seconds <= 600):
        parser.error(f"--seconds {args.seconds} is out of range: give 0.05 to 600")
    rows = bench_simulated(args.seconds)
    rows += bench_pty(find_rtloop_bin(args.rtloop_bin), args.seconds)
    print_table(rows)
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
