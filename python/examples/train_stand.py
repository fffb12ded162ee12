"""Train a policy that stands the simulated quadruped up from lying, with stable-baselines3's
PPO on the CPU, on ``rtloop/Quadruped-v0`` (a benchmark of ``rtloop.gym``, not a test).

    pip install './python[gym]' stable-baselines3
    python python/examples/train_stand.py [--timesteps N] [--envs N] [--out PATH]

Each of ``--envs`` environments (default 2, one per core) runs its own lockstep spine
(``rtloop run --physics --lockstep --agent NAME``) in its own process (SB3's
``SubprocVecEnv``). Episodes are ``rtloop/Quadruped-v0``'s: 5 s at 50 Hz (250 steps),
starting lying on the belly, joints offset by up to 0.1 rad. Actions are ``action_mode="delta"``:
each step moves the joint targets by up to 0.02 rev from where they were, so the zero action
holds the pose and the policy learns the ramp that stands the robot up (a jump straight to
the stand pose throws the body over). The policy is PPO's default MLP. At the end the script rolls the trained policy out deterministically from 5 seeds it
never trained on, and prints the wall time of training and the body's height and tilt at
the end of each episode (standing: about 0.33 m, level). Exit status 1 when the policy does
not stand in every roll-out.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


#: How the example's environments are made (training and evaluation alike).
ENV_KWARGS = {"action_mode": "delta"}


def evaluate(model, env_id: str, seeds) -> list[dict]:
    import gymnasium as gym

    results = []
    env = gym.make(env_id, **ENV_KWARGS)
    try:
        for seed in seeds:
            obs, info = env.reset(seed=seed)
            total, done = 0.0, False
            while not done:
                # The zero action holds the lying pose: the baseline a policy must beat.
                action = np.zeros(12, np.float32) if model is None else model.predict(obs, deterministic=True)[0]
                obs, reward, terminated, truncated, info = env.step(action)
                total += reward
                done = terminated or truncated
            results.append(dict(seed=seed, ret=total, height=info["height_m"], roll=info["roll_deg"],
                                pitch=info["pitch_deg"], fell=terminated))
    finally:
        env.close()
    return results


def stands(r: dict) -> bool:
    return not r["fell"] and r["height"] > 0.28 and abs(r["roll"]) < 10 and abs(r["pitch"]) < 10


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timesteps", type=int, default=200_000, help="PPO timesteps (default 200000)")
    parser.add_argument("--envs", type=int, default=2, help="environments, one process each (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="save the trained policy here (a .zip)")
    args = parser.parse_args(argv)
    if not (1 <= args.envs <= 64 and 1_000 <= args.timesteps <= 100_000_000):
        parser.error("give --envs 1 to 64 and --timesteps 1000 to 100000000")

    import gymnasium as gym  # noqa: F401
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv

    import rtloop.gym as rgym

    # One thread per process for the network: the cores belong to the environments.
    torch.set_num_threads(1)
    # "module:id": each worker process imports rtloop.gym (which registers the id) itself.
    # render_mode None: training draws no frames, so no environment makes a renderer.
    venv = make_vec_env(
        f"rtloop.gym:{rgym.ENV_ID}",
        n_envs=args.envs,
        seed=args.seed,
        vec_env_cls=SubprocVecEnv,
        env_kwargs={"render_mode": None, **ENV_KWARGS},
    )
    model = PPO("MlpPolicy", venv, n_steps=1024, batch_size=256, seed=args.seed, device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(total_timesteps=args.timesteps)
    trained_s = time.perf_counter() - t0
    venv.close()
    if args.out:
        model.save(args.out)
    seeds = range(1000, 1005)
    results = evaluate(model, rgym.ENV_ID, seeds)
    baseline = evaluate(None, rgym.ENV_ID, seeds)
    print(f"trained {args.timesteps} steps ({args.timesteps * 0.02:.0f} s simulated) with {args.envs} envs "
          f"in {trained_s:.0f} s wall ({args.timesteps / trained_s:.0f} steps/s)")
    for name, rows in (("trained policy", results), ("zero action", baseline)):
        ok = sum(stands(r) for r in rows)
        print(f"{name}: stands in {ok}/{len(rows)} episodes; "
              + "; ".join(f"seed {r['seed']}: return {r['ret']:.1f}, height {r['height']:.3f} m, "
                          f"roll {r['roll']:.1f}, pitch {r['pitch']:.1f}" for r in rows))
    return 0 if all(stands(r) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
