"""``rtloop.gym`` throughput in simulated seconds per wall second, beside the spine's own
lockstep rate and Gymnasium's MuJoCo ``Ant-v5``, all measured in one run.

    python python/bench/bench_gym.py [--rtloop-bin PATH] [--seconds S] [--json]

Importable: ``main(argv=None) -> list[dict]`` returns rows ``{"what", "value", "unit",
"detail"}`` (and prints them when run as a script). Needs gymnasium, an ``rtloop`` program
built with physics (``cargo build --release -p rtloop-cli --features physics``), and for
the ``Ant-v5`` row the ``mujoco`` Python package (``pip install 'gymnasium[mujoco]'``).

What is measured (``gym.make`` defaults: 50 Hz policy, 20 cycles of the 1 kHz loop per
step; each row is simulated seconds per wall second over ``--seconds`` of stepping):

* **spine alone**: ``rtloop run --physics --lockstep`` with its built-in motion, no agent —
  the rate the simulation itself reaches (the servo models and MuJoCo at 1 kHz), from two
  durations so that start-up does not count.
* **one env**: ``env.step()`` of ``rtloop/Quadruped-v0`` with a fixed action, the whole
  hand-off included (the Python process and the spine process).
* **one env beside a CPU-bound process**: the same with a busy-looping process running.
* **two envs on two cores**: two processes, each stepping its own env, summed.
* **idle env CPU**: the CPU time the spine and the learner's process use over 5 s of a
  pause between steps, from 1.5 s into it (what an env costs while the learner updates its
  policy).
* **Ant-v5**: ``gym.make("Ant-v5")`` stepped with a fixed action (its ``dt`` 0.05 s).

Nothing is pinned: the processes go where the scheduler puts them, as a user's would.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from typing import Any, Optional

import numpy as np

import bench_support


def _spine_alone(bin_path: str, duration_s: float) -> float:
    """Wall seconds of ``rtloop run --physics --lockstep --duration D`` (no agent)."""
    t0 = time.perf_counter()
    subprocess.run(
        [bin_path, "run", "--physics", "--lockstep", "--quiet", "--duration", f"{duration_s:g}"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


def _env_rate(bin_path: str, seconds: float, queue=None) -> float:
    """Simulated seconds per wall second of one env, stepped for ``seconds``."""
    import gymnasium as gym

    import rtloop.gym as rgym

    env = gym.make(rgym.ENV_ID, program=bin_path, max_episode_steps=10**9)
    try:
        env.reset(seed=1)
        action = np.zeros(12, dtype=np.float32)
        for _ in range(20):  # warm up
            env.step(action)
        steps = 0
        t0 = time.perf_counter()
        end = t0 + seconds
        while True:
            for _ in range(25):
                env.step(action)
            steps += 25
            now = time.perf_counter()
            if now >= end:
                break
        rate = steps * env.unwrapped.dt / (now - t0)
    finally:
        env.close()
    if queue is not None:
        queue.put(rate)
    return rate


def _busy() -> None:
    while True:
        pass


def _cpu_s(pid: int) -> float:
    """CPU seconds process ``pid`` ran so far, all its threads (the scheduler's own
    nanosecond account, ``/proc/PID/task/TID/schedstat``)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # a thread that ended meanwhile
    return total * 1e-9


def _idle_cpu(bin_path: str, idle_s: float = 5.0) -> tuple[float, float]:
    """CPU use (fraction of a core) of the spine and of this process while an env idles:
    measured over ``idle_s`` from 1.5 s into a pause (a learner updating its policy)."""
    import gymnasium as gym

    import rtloop.gym as rgym

    env = gym.make(rgym.ENV_ID, program=bin_path)
    try:
        env.reset(seed=1)
        env.step(np.zeros(12))
        pid = env.unwrapped.spine_pid
        time.sleep(1.5)
        spine0, me0 = _cpu_s(pid), _cpu_s(os.getpid())
        time.sleep(idle_s)
        spine1, me1 = _cpu_s(pid), _cpu_s(os.getpid())
        env.step(np.zeros(12))  # still alive after the pause
    finally:
        env.close()
    return (spine1 - spine0) / idle_s, (me1 - me0) / idle_s


def _ant_rate(seconds: float) -> Optional[float]:
    import gymnasium as gym

    try:
        env = gym.make("Ant-v5")
    except Exception:  # noqa: BLE001 - mujoco missing: not measured, said so
        return None
    try:
        env.reset(seed=1)
        action = np.zeros(env.action_space.shape, dtype=np.float32)
        steps = 0
        t0 = time.perf_counter()
        end = t0 + seconds
        while True:
            for _ in range(50):
                _, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    env.reset()
            steps += 50
            now = time.perf_counter()
            if now >= end:
                break
        return steps * env.unwrapped.dt / (now - t0)
    finally:
        env.close()


def main(argv: Optional[list[str]] = None) -> list[dict[str, Any]]:
    """Run the measurements; return (and, as a script, print) the rows."""
    args, bin_path = bench_support.spine_bench_args(__doc__, argv, "wall seconds of stepping per row (default 2)")
    try:
        import gymnasium  # noqa: F401

        import rtloop.gym  # noqa: F401
    except ImportError as e:
        return [dict(what="env simulated s / wall s", value=float("nan"), unit="x", detail=f"not measured: {e}")]
    seconds = args.seconds
    rows: list[dict[str, Any]] = []

    short, long = 2.0, 2.0 + 12.0 * max(seconds, 0.5)
    t_short, t_long = _spine_alone(bin_path, short), _spine_alone(bin_path, long)
    spine = (long - short) / max(t_long - t_short, 1e-9)
    rows.append(dict(what="spine alone (lockstep)", value=spine, unit="sim s / wall s",
                     detail=f"rtloop run --physics --lockstep, {long - short:g} s simulated in {t_long - t_short:.2f} s"))

    one = _env_rate(bin_path, seconds)
    rows.append(dict(what="one env", value=one, unit="sim s / wall s",
                     detail=f"gym.make('rtloop/Quadruped-v0') defaults (dt 0.02 s); {one / spine:.2f}x the spine alone (goal 0.8)"))

    busy = multiprocessing.get_context("spawn").Process(target=_busy, daemon=True)
    busy.start()
    try:
        time.sleep(0.2)
        loaded = _env_rate(bin_path, seconds)
    finally:
        busy.terminate()
        busy.join()
    rows.append(dict(what="one env + a CPU-bound process", value=loaded, unit="sim s / wall s",
                     detail=f"{loaded / one:.2f}x quiet (goal 0.5)"))

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_env_rate, args=(bin_path, seconds, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    rates = [queue.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    two = sum(rates)
    rows.append(dict(what="two envs, two processes", value=two, unit="sim s / wall s",
                     detail=f"{two / one:.2f}x one env (goal 1.6) on {os.cpu_count()} CPUs"))

    spine_cpu, learner_cpu = _idle_cpu(bin_path)
    rows.append(dict(what="idle env CPU", value=100 * (spine_cpu + learner_cpu), unit="% of a core",
                     detail=f"spine {100 * spine_cpu:.3f} %, learner {100 * learner_cpu:.3f} % over 5 s of a pause"))

    ant = _ant_rate(seconds)
    rows.append(dict(what="Ant-v5", value=float("nan") if ant is None else ant, unit="sim s / wall s",
                     detail="gym.make('Ant-v5') defaults (dt 0.05 s, frame_skip 5)" if ant is not None
                     else "not measured: gymnasium[mujoco] is not installed"))
    return rows


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    bench_support.print_rows(main())
