"""``rtloop.gym`` from Python: ``env.step()`` of ``rtloop/Quadruped-v0`` (the quadruped on
MuJoCo behind a lockstep spine, ``rtloop run --physics --lockstep --agent NAME``).

    python python/bench/bench_gym.py [--rtloop-bin PATH] [--seconds S] [--json]

Importable: ``main(argv=None) -> list[dict]`` returns rows ``{"what", "value", "unit",
"detail"}`` (and prints them when run as a script). Needs gymnasium and an ``rtloop``
program built with physics (``cargo build --release -p rtloop-cli --features
"$(tools/features)"``).

What is measured:

* **env.step() steps/s**: the steps one Python process makes in ``--seconds`` of wall time,
  one 1 kHz cycle per step (``cycles_per_step=1``), the agent standing the robot up from
  lying and holding it (the actions precomputed, so the figure is the environment's, not
  the policy's): action clipped and sent (``Agent.command``), the spine's cycle (servo
  models and MuJoCo), the next state copied out, observation, reward and ``info`` built.
* **env.reset()**: the wall time of a reset in the running spine (the world back to lying,
  settled limp for the run's ``settle_s`` of simulated time — 1 s by default, about a
  thousand MuJoCo steps — then one cycle).

The spine runs on CPU 0 (``--cpu 0``) and this process on CPU 1 when there are two.
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional

import numpy as np

import bench_support


def main(argv: Optional[list[str]] = None) -> list[dict[str, Any]]:
    """Run the measurements; return (and, as a script, print) the rows."""
    args, bin_path = bench_support.spine_bench_args(__doc__, argv, "wall seconds of stepping (default 2)")
    try:
        import gymnasium as gym

        import rtloop.gym as rgym
    except ImportError as e:
        # Not measured here, said so (bench.py goes on with the other parts).
        return [dict(what="env.step() steps/s", value=float("nan"), unit="steps/s", detail=f"not measured: {e}")]
    pin = not args.no_pin and (os.cpu_count() or 1) >= 2 and hasattr(os, "sched_setaffinity")
    saved = os.sched_getaffinity(0) if pin else None
    if pin:
        os.sched_setaffinity(0, {1})
    rows: list[dict[str, Any]] = []
    env = gym.make(rgym.ENV_ID, program=bin_path, max_episode_steps=10**9, spine_args=["--cpu", "0"] if pin else [])
    try:
        resets = []
        for seed in range(5):
            t0 = time.perf_counter()
            obs, _ = env.reset(seed=seed)
            resets.append(time.perf_counter() - t0)
        stand = np.tile(rgym.STAND_POSE, 4)
        start = obs[:12].astype(np.float64)
        ramp = [
            (start + (stand - start) * (x * x * (3 - 2 * x))).astype(np.float32)
            for x in np.minimum(np.arange(1000) / 1000.0, 1.0)
        ]
        step = env.step
        for a in ramp[:100]:  # warm up
            step(a)
        steps, k = 0, 100
        hold = stand.astype(np.float32)
        t0 = time.perf_counter()
        end = t0 + args.seconds
        while True:
            for _ in range(100):
                step(ramp[k] if k < len(ramp) else hold)
                k += 1
            steps += 100
            now = time.perf_counter()
            if now >= end:
                break
        elapsed = now - t0
        _, _, terminated, _, info = step(hold)
        rows.append(
            dict(
                what="env.step() steps/s",
                value=steps / elapsed,
                unit="steps/s",
                detail=f"rtloop/Quadruped-v0, 1 cycle (1 ms simulated) per step, {steps} steps in {elapsed:.2f} s, "
                f"standing up then holding (height {info['height_m']:.3f} m, terminated {terminated}); "
                f"{'spine on CPU 0, Python on CPU 1' if pin else 'unpinned'}",
            )
        )
        rows.append(
            dict(
                what="env.reset()",
                value=1e3 * float(np.median(resets)),
                unit="ms",
                detail=f"median of {len(resets)} resets in the running spine (same pid), settle 1 s simulated",
            )
        )
    finally:
        env.close()
        if saved is not None:
            os.sched_setaffinity(0, saved)
    return rows


if __name__ == "__main__":
    bench_support.print_rows(main())
