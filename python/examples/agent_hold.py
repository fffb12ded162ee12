"""An rtloop agent in Python: arm the spine, hold every joint at the stand pose of
examples/agent.c (0 rev), exit 0 when the spine ends.

    rtloop run --agent demo --duration 30 &
    python python/examples/agent_hold.py demo
"""

import sys

import rtloop

STAND = 0.0  # rev: the stand pose of every joint (examples/agent.c)


def main(name: str) -> int:
    """Hold the stand pose until the spine ends; 1 with one line if it cannot attach."""
    try:
        agent = rtloop.Agent(name)  # waits up to 5 s for the spine
    except (OSError, RuntimeError, ValueError) as e:
        print(f"agent_hold: {e}", file=sys.stderr)
        return 1
    with agent:
        for _state in agent:  # every new state; the first command also arms the spine
            agent.command(position=STAND, velocity=0.0, kp_scale=1.0, kd_scale=1.0, watchdog_timeout=0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "demo"))
