"""Official moteus code against rtloop's simulator, then the same code through rtloop's transport.

Needs the moteus package (``pip install moteus==1.1.1``). Run: ``python moteus_on_sim.py``.

1. ``rtloop.sim.fdcanusb`` serves simulated servos behind a pseudo-terminal that speaks the
   fdcanusb protocol; ``moteus.Fdcanusb(path)`` opens it as it would a real adapter.
2. The one-line change: ``rtloop.moteus_transport.Transport`` instead of ``moteus.Fdcanusb``
   sends the same commands through rtloop's native multi-bus cycle.

Positions are in revolutions, velocities in rev/s, torques in N·m.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import moteus

import rtloop
import rtloop.moteus_transport


async def query_and_move(transport: Any, label: str) -> None:
    """Query servo 1, command it to 0.1 rev for half a second, and print what it reports."""
    servo = moteus.Controller(1, transport=transport)
    state = await servo.query()
    print(
        f"[{label}] at start: mode {state.values[moteus.Register.MODE]}, "
        f"position {state.values[moteus.Register.POSITION]:+.4f} rev"
    )
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        state = await servo.set_position(position=0.1, velocity=0.0, query=True)
        await asyncio.sleep(0.005)
    print(
        f"[{label}] after 0.5 s: mode {state.values[moteus.Register.MODE]}, "
        f"position {state.values[moteus.Register.POSITION]:+.4f} rev, "
        f"torque {state.values[moteus.Register.TORQUE]:+.3f} N·m"
    )
    await servo.set_stop()


async def main() -> None:
    """Drive one simulated servo with moteus' own transport, then with rtloop's."""
    with rtloop.sim.fdcanusb(servos=[1]) as path:
        print(f"simulated fdcanusb at {path}")

        # Unmodified moteus code: its own transport on the simulator's pty.
        transport = moteus.Fdcanusb(path)
        try:
            await query_and_move(transport, "moteus.Fdcanusb")
        finally:
            # Close clients before the simulator stops, or their reader sees a hung-up pty.
            transport.close()

        # The one-line change: the same commands through rtloop's native cycle.
        transport = rtloop.moteus_transport.Transport(buses={1: f"fdcanusb:{path}"}, servos={1: [1]})
        try:
            await query_and_move(transport, "rtloop transport")
        finally:
            transport.close()


if __name__ == "__main__":
    asyncio.run(main())
