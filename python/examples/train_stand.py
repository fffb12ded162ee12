"""Train a policy that stands the simulated quadruped up from lying, with stable-baselines3's
PPO on the CPU, on ``rtloop/Quadruped-v0`` (a benchmark of ``rtloop.gym``, not a test).

    pip install './python[gym]' stable-baselines3
    python python/examples/train_stand.py [--timesteps N] [--envs N] [--out PATH]

Each of ``--envs`` environments (default 2, one per core) runs its own lockstep spine
(``rtloop run --physics --lockstep --agent NAME``) in its own process (SB3's
``SubprocVecEnv``). Episodes are ``rtloop/Quadruped-v0``'s: 5 s at 50 Hz (250 steps),
starting lying on the belly, joints offset by up to 0.1 rad, with the environment's default
reward. Actions are joint targets normalised to [-1, 1]; the servos move to each target at
up to 0.5 rev/s (``velocity_limit``, moteus's own trajectory limit), so whatever the policy
asks becomes a ramp (a jump straight to the stand pose would throw the body over).

The recipe is PPO's defaults but three, each the usual one for MuJoCo locomotion:
observations and rewards normalised by running statistics (SB3's ``VecNormalize``: the IMU's
rates in °/s are a hundred times the joint positions in rev), a smaller initial exploration
noise (``log_std_init=-1``: a standard deviation of 0.37 of each joint's half range rather
than all of it, which shakes a standing robot over), and 1 024 steps per env per update
in batches of 256.

With the defaults (300 000 steps, 2 envs) it trains in about 10 minutes on 2 cores and the
policy stands in 5/5 (docs/gym.md, "Training": the figures, and what did not learn). It
prints progress as it trains, then rolls the trained policy out deterministically from
5 seeds it never trained on, beside the zero action (the middle of every joint's range: a
crouch), and prints the body's height and tilt at the end of each episode (standing: about
0.33 m, level). Exit status 0 only when the policy stands in every roll-out. With ``--out
PATH`` it saves the policy (``PATH``, SB3's zip) and the normalisation (``PATH.vecnormalize``).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Callable, Iterable, List

import numpy as np

#: How the example's environments are made (training and evaluation alike).
ENV_KWARGS = {"velocity_limit": 0.5}

#: PPO's settings that are not SB3's defaults.
PPO_KWARGS = {"n_steps": 1024, "batch_size": 256, "policy_kwargs": {"log_std_init": -1.0}}

#: The unseen seeds the trained policy is checked on.
EVALUATION_SEEDS = range(1000, 1005)


def evaluate(policy: Callable[[np.ndarray], np.ndarray], seeds: Iterable[int], **env_kwargs) -> List[dict]:
    """Roll ``policy`` (observation → action) out for one episode per seed; the end of each."""
    import gymnasium as gym

    import rtloop.gym as rgym

    results = []
    env = gym.make(rgym.ENV_ID, **{**ENV_KWARGS, **env_kwargs})
    try:
        for seed in seeds:
            obs, info = env.reset(seed=seed)
            total, done, terminated = 0.0, False, False
            while not done:
                obs, reward, terminated, truncated, info = env.step(policy(obs))
                total += reward
                done = terminated or truncated
            results.append(
                dict(
                    seed=seed,
                    ret=total,
                    height=info["height_m"],
                    roll=info["roll_deg"],
                    pitch=info["pitch_deg"],
                    fell=terminated,
                )
            )
    finally:
        env.close()
    return results


def stands(r: dict) -> bool:
    """Whether an episode ended standing: not fallen, above 0.28 m, within 10° of level."""
    return not r["fell"] and r["height"] > 0.28 and abs(r["roll"]) < 10 and abs(r["pitch"]) < 10


def report(name: str, rows: List[dict]) -> str:
    ok = sum(stands(r) for r in rows)
    return f"{name}: stands in {ok}/{len(rows)} episodes; " + "; ".join(
        f"seed {r['seed']}: return {r['ret']:.1f}, height {r['height']:.3f} m, "
        f"roll {r['roll']:.1f}°, pitch {r['pitch']:.1f}°" + (", fell" if r["fell"] else "")
        for r in rows
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timesteps", type=int, default=300_000, help="PPO timesteps (default 300000)")
    parser.add_argument("--envs", type=int, default=2, help="environments, one process each (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the training (default 0)")
    parser.add_argument("--out", default=None, help="save the trained policy here (a .zip)")
    args = parser.parse_args(argv)
    if not (1 <= args.envs <= 64 and 1_000 <= args.timesteps <= 100_000_000):
        parser.error("give --envs 1 to 64 and --timesteps 1000 to 100000000")

    try:
        import torch
        from stable_baselines3 import PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import SubprocVecEnv, VecNormalize
    except ImportError as e:
        print(f"train_stand.py needs stable-baselines3 ({e}); install it with pip install stable-baselines3",
              file=sys.stderr)
        return 2

    import rtloop.gym as rgym

    # One thread per process for the network: the cores belong to the environments.
    torch.set_num_threads(1)
    # "module:id": each worker process imports rtloop.gym (which registers the id) itself.
    # render_mode None: training draws no frames, so no environment makes a renderer.
    venv = VecNormalize(
        make_vec_env(
            f"rtloop.gym:{rgym.ENV_ID}",
            n_envs=args.envs,
            seed=args.seed,
            vec_env_cls=SubprocVecEnv,
            env_kwargs={"render_mode": None, **ENV_KWARGS},
        )
    )
    t0 = time.perf_counter()

    class Progress(BaseCallback):
        """A line every 20 000 steps: the mean return and length of the last 100 episodes."""

        def __init__(self) -> None:
            super().__init__()
            self.next = 20_000

        def _on_step(self) -> bool:
            if self.num_timesteps >= self.next:
                self.next += 20_000
                episodes = self.model.ep_info_buffer
                if episodes:
                    ret = np.mean([e["r"] for e in episodes])
                    length = np.mean([e["l"] for e in episodes])
                    print(f"{self.num_timesteps} steps, {time.perf_counter() - t0:.0f} s: "
                          f"episodes return {ret:.1f}, last {length:.0f} steps", flush=True)
            return True

    model = PPO("MlpPolicy", venv, seed=args.seed, device="cpu", verbose=0, **PPO_KWARGS)
    model.learn(total_timesteps=args.timesteps, callback=Progress())
    trained_s = time.perf_counter() - t0
    venv.training = False
    venv.close()
    if args.out:
        model.save(args.out)
        venv.save(args.out + ".vecnormalize")

    def trained(obs: np.ndarray) -> np.ndarray:
        return model.predict(venv.normalize_obs(obs), deterministic=True)[0]

    results = evaluate(trained, EVALUATION_SEEDS)
    baseline = evaluate(lambda obs: np.zeros(12, np.float32), EVALUATION_SEEDS)
    print(f"trained {args.timesteps} steps ({args.timesteps * 0.02:.0f} s simulated) with {args.envs} envs "
          f"in {trained_s:.0f} s wall ({args.timesteps / trained_s:.0f} steps/s)")
    print(report("trained policy", results))
    print(report("zero action", baseline))
    return 0 if all(stands(r) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
