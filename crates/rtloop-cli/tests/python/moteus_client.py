#!/usr/bin/env python3
"""Drive an fdcanusb device with the unmodified moteus Python package and report JSON.

    moteus_client.py PATH check       query, position commands that move the joint, stop,
                                      and a query to an absent id that must time out
    moteus_client.py PATH bench IDS SECONDS
                                      query the servos in IDS (e.g. 1,2,3) in a loop and
                                      report transactions per second, and how many failed
                                      (the client gave up) or came back incomplete

Used by crates/rtloop-cli/tests/cli/moteus_python.rs and crates/rtloop-cli/benches/fdcanusb.rs.
"""
import asyncio
import json
import math
import sys
import time

import moteus


def state(result):
    v = result.values
    def get(reg):
        x = v.get(reg)
        return None if x is None or (isinstance(x, float) and math.isnan(x)) else x
    return {
        "mode": get(moteus.Register.MODE),
        "position": get(moteus.Register.POSITION),
        "velocity": get(moteus.Register.VELOCITY),
        "voltage": get(moteus.Register.VOLTAGE),
        "fault": get(moteus.Register.FAULT),
    }


async def check(path):
    transport = moteus.Fdcanusb(path)
    c = moteus.Controller(id=1, transport=transport)
    out = {}
    out["query"] = state(await c.query())
    # 100 Hz position commands for 1.5 s: the joint must move to 0.2 rev.
    last = None
    for _ in range(150):
        last = await c.set_position(position=0.2, velocity=0.0, maximum_torque=4.0, query=True)
        await asyncio.sleep(0.01)
    out["position"] = state(last)
    out["stop"] = state(await c.set_stop(query=True))
    out["stop_after"] = state(await c.query())
    absent = moteus.Controller(id=5, transport=transport)
    # moteus 1.1.1 gives up on its own and returns None; older versions wait forever.
    try:
        result = await asyncio.wait_for(absent.query(), 2.0)
        out["absent"] = "timeout" if result is None else "replied"
    except asyncio.TimeoutError:
        out["absent"] = "timeout"
    print(json.dumps(out))


async def bench(path, ids, seconds):
    transport = moteus.Fdcanusb(path)
    controllers = [moteus.Controller(id=i, transport=transport) for i in ids]
    end = time.monotonic() + seconds
    start = time.monotonic()
    n = 0
    # A transaction the client gives up on (moteus 1.1.1 treats the pty as a UART: it waits
    # 0.2 s for `OK` and raises "transaction failed after 1 retries") is counted, not fatal:
    # the benchmark reports it beside the rate.
    failed = 0
    incomplete = 0
    first_error = None
    while time.monotonic() < end:
        try:
            results = await transport.cycle([c.make_query() for c in controllers])
        except Exception as e:  # the moteus package raises plain RuntimeErrors
            failed += 1
            if first_error is None:
                first_error = f"{type(e).__name__}: {e}"
            continue
        if len(results) == len(controllers):
            n += 1
        else:
            incomplete += 1
    elapsed = time.monotonic() - start
    print(json.dumps({
        "transactions": n,
        "failed": failed,
        "incomplete": incomplete,
        "first_error": first_error,
        "elapsed_s": elapsed,
        "rate_hz": n / elapsed,
        "servos": len(ids),
    }))


def main():
    path, mode = sys.argv[1], sys.argv[2]
    if mode == "check":
        asyncio.run(check(path))
    elif mode == "bench":
        ids = [int(x) for x in sys.argv[3].split(",")]
        asyncio.run(bench(path, ids, float(sys.argv[4])))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
