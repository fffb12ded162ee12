"""How much faster moteus code runs through rtloop's transport.

The same position+query cycle (``Controller.make_position(position=0, velocity=0,
query=True)`` for every servo, one ``transport.cycle()``) is run for a fixed time through

* moteus' own transport: ``moteus.Fdcanusb`` for one bus, ``moteus.Transport`` over one
  ``moteus.FdcanusbDevice`` per bus (with a routing table, so no discovery) for several;
* ``rtloop.moteus_transport.Transport`` over the same ptys;
* ``rtloop.moteus_transport.Transport`` over in-process ``sim`` buses that take no wire time
  (no pty, no simulator thread: what is left is moteus' command building and parsing plus
  rtloop's cycle — the ceiling for this transport),

against ``rtloop.sim.serve(..., instant=True)`` ptys (simulated wires take no time, so the
figures measure the clients), for 1 bus × 3 servos and 4 buses × 3 servos.

Run it alone (``python bench/bench_moteus.py --seconds 2``) or import it:
``main(argv) -> list[dict]``, one row ``{"what", "value", "unit", "detail"}`` per figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence

import moteus

import rtloop
import rtloop.moteus_transport

Row = Dict[str, Any]


async def _rate(transport: Any, servo_ids: Sequence[int], seconds: float) -> Dict[str, float]:
    """Cycle position+query commands to every servo for ``seconds``; cycles/s and latencies."""
    controllers = [moteus.Controller(i, transport=transport) for i in servo_ids]
    # Warm up (first opens, lazy reader tasks, routing).
    for _ in range(20):
        await transport.cycle([c.make_position(position=0.0, velocity=0.0, query=True) for c in controllers])
    durations: List[float] = []
    missing = 0
    start = time.perf_counter()
    end = start + seconds
    while True:
        t0 = time.perf_counter()
        results = await transport.cycle(
            [c.make_position(position=0.0, velocity=0.0, query=True) for c in controllers]
        )
        t1 = time.perf_counter()
        durations.append(t1 - t0)
        missing += len(servo_ids) - len(results)
        if t1 >= end:
            break
    elapsed = time.perf_counter() - start
    durations.sort()
    return {
        "hz": len(durations) / elapsed,
        "p50_us": statistics.median(durations) * 1e6,
        "p99_us": durations[min(len(durations) - 1, int(len(durations) * 0.99))] * 1e6,
        "cycles": float(len(durations)),
        "missing": float(missing),
    }


async def _moteus_transport(paths: Dict[int, str], layout: Dict[int, List[int]]) -> Any:
    """moteus' own transport over the ptys (inside the running loop, as moteus needs)."""
    if len(paths) == 1:
        return moteus.Fdcanusb(next(iter(paths.values())))
    devices = {bus: moteus.FdcanusbDevice(path) for bus, path in paths.items()}
    routing = {moteus.DeviceAddress(can_id=i): devices[bus] for bus, ids in layout.items() for i in ids}
    return moteus.Transport(list(devices.values()), routing_table=routing)


def _layout(buses: int, per_bus: int) -> Dict[int, List[int]]:
    return {b: [per_bus * (b - 1) + k + 1 for k in range(per_bus)] for b in range(1, buses + 1)}


async def _measure(
    make: Callable[[], Awaitable[Any]],
    servo_ids: Sequence[int],
    seconds: float,
) -> Dict[str, float]:
    """Make a transport, measure it, close it."""
    transport = await make()
    try:
        return await _rate(transport, servo_ids, seconds)
    finally:
        transport.close()


def _rows_for(name: str, detail: str, r: Dict[str, float]) -> List[Row]:
    return [
        {
            "what": f"{name}: cycles/s",
            "value": round(r["hz"], 1),
            "unit": "cycles/s",
            "detail": f"{detail}; {int(r['cycles'])} cycles, {int(r['missing'])} replies missing",
        },
        {"what": f"{name}: cycle p50", "value": round(r["p50_us"], 1), "unit": "us", "detail": detail},
        {"what": f"{name}: cycle p99", "value": round(r["p99_us"], 1), "unit": "us", "detail": detail},
    ]


def _bench_shape(layout: Dict[int, List[int]], seconds: float) -> List[Row]:
    """Every measurement for one bus layout."""
    nbus, per_bus = len(layout), len(next(iter(layout.values())))
    ids = [i for b in sorted(layout) for i in layout[b]]
    shape = f"{nbus} bus{'es' if nbus > 1 else ''} x {per_bus} servos"
    with rtloop.sim.serve(layout, "fdcanusb", instant=True) as simulator:
        paths, uris = simulator.paths, simulator.uris

        async def theirs_pty() -> Any:
            return await _moteus_transport(paths, layout)

        async def ours_pty() -> Any:
            return rtloop.moteus_transport.Transport(uris, layout)

        theirs = asyncio.run(_measure(theirs_pty, ids, seconds))
        ours = asyncio.run(_measure(ours_pty, ids, seconds))
        report = simulator.stop()

    async def ours_sim() -> Any:
        return rtloop.moteus_transport.Transport({b: "sim" for b in layout}, layout, sim_instant=True)

    in_process = asyncio.run(_measure(ours_sim, ids, seconds))

    kind = "moteus.Fdcanusb" if nbus == 1 else "moteus.Transport over moteus.FdcanusbDevice"
    rows = _rows_for(f"moteus' own transport ({kind}), {shape}", "rtloop.sim ptys, instant", theirs)
    rows += _rows_for(
        f"rtloop.moteus_transport over fdcanusb ptys, {shape}", "rtloop.sim ptys, instant", ours
    )
    rows += _rows_for(
        f"rtloop.moteus_transport over in-process sim buses, {shape}",
        "no pty, no simulator thread, instant: moteus' command building and parsing plus rtloop's cycle",
        in_process,
    )
    rows.append(
        {
            "what": f"speed-up of rtloop's transport over moteus', {shape}",
            "value": round(ours["hz"] / theirs["hz"], 2),
            "unit": "x",
            "detail": "cycles/s ratio, same ptys",
        }
    )
    rows.append(
        {
            "what": f"simulator protocol errors, {shape}",
            "value": sum(e["protocol_errors"] for e in report["endpoints"]),
            "unit": "errors",
            "detail": report["text"],
        }
    )
    return rows


def main(argv: Optional[Sequence[str]] = None) -> List[Row]:
    """Run the benchmark; returns the rows (and prints them, one JSON object a line, unless
    ``--quiet``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement, s (default 2)")
    parser.add_argument("--servos-per-bus", type=int, default=3, help="servos on each bus (default 3)")
    parser.add_argument(
        "--buses", type=int, nargs="+", default=[1, 4], help="bus counts to try (default 1 4)"
    )
    parser.add_argument("--quiet", action="store_true", help="do not print the rows")
    args = parser.parse_args(argv)
    if not (0.0 < args.seconds <= 600.0):
        parser.error("--seconds must be above 0 and at most 600")
    if not (1 <= args.servos_per_bus <= 32):
        parser.error("--servos-per-bus must be 1 to 32")
    if any(not (1 <= b <= 16) for b in args.buses) or args.servos_per_bus * max(args.buses) > 127:
        parser.error("--buses must be 1 to 16, with at most 127 servos in all")

    rows: List[Row] = []
    for nbus in args.buses:
        rows += _bench_shape(_layout(nbus, args.servos_per_bus), args.seconds)
    if not args.quiet:
        for row in rows:
            print(json.dumps(row))
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
