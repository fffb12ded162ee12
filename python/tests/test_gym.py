"""rtloop.gym: the quadruped on MuJoCo as a Gymnasium environment, over one lockstep spine
(``rtloop run --physics --lockstep --agent NAME``) that resets without restarting."""

import os
import warnings

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

import rtloop.gym as rgym  # noqa: E402  (registers rtloop/Quadruped-v0)
from gymnasium.utils.env_checker import check_env  # noqa: E402


@pytest.fixture(scope="module")
def env(rtloop_bin):
    e = gym.make("rtloop/Quadruped-v0", program=rtloop_bin, max_episode_steps=200)
    yield e
    e.close()


def rollout(env, seed, actions):
    obs, info = env.reset(seed=seed)
    out = [obs]
    for a in actions:
        obs, reward, terminated, truncated, info = env.step(a)
        out.append(obs)
    return np.array(out), info


def test_the_environment_passes_gymnasiums_checker(rtloop_bin):
    # Its own environment: the checker closes it at the end.
    env = gym.make("rtloop/Quadruped-v0", program=rtloop_bin)
    with warnings.catch_warnings():
        # Gymnasium recommends a [-1, 1] action space; ours is joint targets in rev, as
        # documented.
        warnings.filterwarnings("ignore", message=".*symmetric and normalized space.*")
        # Observations are unbounded readings (velocities, rates, accelerations).
        warnings.filterwarnings("ignore", message=".*Box observation space m.*")
        check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_spaces_are_as_documented(env):
    assert env.action_space.shape == (12,)
    assert env.observation_space.shape == (34,)
    assert env.observation_space.dtype == np.float32
    np.testing.assert_array_equal(env.action_space.low, rgym.ACTION_LOW)
    obs, info = env.reset(seed=3)
    assert obs.dtype == np.float32 and obs.shape == (34,)
    assert set(info) == {"height_m", "roll_deg", "pitch_deg", "steps"}
    # Lying on the ground, level.
    assert 0.0 < info["height_m"] < 0.2
    assert abs(info["roll_deg"]) < 10 and abs(info["pitch_deg"]) < 10
    # The IMU quaternion is a unit quaternion.
    assert abs(np.linalg.norm(obs[24:28]) - 1.0) < 1e-3


def test_the_same_seed_gives_the_same_episode_and_another_seed_another(env):
    rng = np.random.default_rng(0)
    low, high = rgym.ACTION_LOW, rgym.ACTION_HIGH
    actions = [rng.uniform(low, high).astype(np.float32) for _ in range(50)]
    pid = env.unwrapped.spine_pid
    a, info_a = rollout(env, 11, actions)
    other, _ = rollout(env, 12, actions)
    b, info_b = rollout(env, 11, actions)
    np.testing.assert_array_equal(a[0], b[0])  # identical observations after the reset
    np.testing.assert_array_equal(a, b)  # identical trajectories for the same actions
    assert info_a == info_b
    assert not np.array_equal(a[0], other[0]), "seeds 11 and 12 gave the same start"
    # Every reset happened in the same spine process.
    assert env.unwrapped.spine_pid == pid
    assert os.path.exists(f"/proc/{pid}")


def test_many_resets_in_one_process(env):
    pid = env.unwrapped.spine_pid
    for seed in range(5):
        obs, info = env.reset(seed=100 + seed)
        assert info["steps"] == 0
        obs, *_ = env.step(env.action_space.sample())
    assert env.unwrapped.spine_pid == pid
    state = env.unwrapped._agent.state()
    assert state.resets >= 5 and state.reset_result == "done"


def test_a_ramp_to_the_stand_pose_stands_the_quadruped_up(rtloop_bin):
    """The issue's "done when": rtloop run --physics --lockstep --agent NAME with the Python
    environment stands the quadruped up."""
    env = gym.make("rtloop/Quadruped-v0", program=rtloop_bin, max_episode_steps=3000)
    try:
        obs, info = env.reset(seed=7)
        start = obs[:12].astype(np.float64)
        stand = np.tile(rgym.STAND_POSE, 4)
        terminated = truncated = False
        for k in range(1500):
            s = min(k / 1000.0, 1.0)
            s = s * s * (3 - 2 * s)
            obs, reward, terminated, truncated, info = env.step(start + (stand - start) * s)
            assert not terminated, f"the quadruped fell at step {k}: {info}"
        assert info["height_m"] > 0.28, info
        assert abs(info["roll_deg"]) < 3 and abs(info["pitch_deg"]) < 3, info
        assert reward > 0.8, reward
        assert not truncated
        # Truncated at max_episode_steps (gym.make's TimeLimit).
        for _ in range(1500):
            *_, truncated, info = env.step(stand)
        assert truncated and info["steps"] == 3000
    finally:
        env.close()


def test_close_ends_the_spine(rtloop_bin):
    env = gym.make("rtloop/Quadruped-v0", program=rtloop_bin)
    env.reset(seed=1)
    process = env.unwrapped._process
    env.close()
    assert process.poll() is not None, "the spine still runs after close()"
    env.close()  # twice is harmless
    with pytest.raises(RuntimeError, match="closed"):
        env.unwrapped.reset()


def test_a_missing_program_or_a_bad_argument_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError):
        rgym.QuadrupedEnv(program=str(tmp_path / "no-such-rtloop"))
    with pytest.raises(ValueError, match="cycles_per_step"):
        rgym.QuadrupedEnv(cycles_per_step=0)
