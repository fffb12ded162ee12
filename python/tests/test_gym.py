"""rtloop.gym: the quadruped on MuJoCo as a Gymnasium environment, over one lockstep spine
(``rtloop run --physics --lockstep --agent NAME``) that resets without restarting."""

import importlib.util
import os
import pathlib
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

import rtloop.gym as rgym  # noqa: E402  (registers rtloop/Quadruped-v0)
from gymnasium.utils.env_checker import check_env  # noqa: E402

#: The stand pose as a normalised action.
STAND_ACTION = ((np.tile(rgym.STAND_POSE, 4) - rgym.ACTION_LOW) / (rgym.ACTION_HIGH - rgym.ACTION_LOW) * 2 - 1).astype(
    np.float32
)


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


@pytest.mark.parametrize("env_id", [rgym.ENV_ID, rgym.WALK_ENV_ID])
def test_the_environments_pass_gymnasiums_checker(rtloop_bin, env_id):
    # Its own environment: the checker closes it at the end.
    env = gym.make(env_id, program=rtloop_bin, domain_randomization=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # Observations are unbounded readings (velocities, rates, accelerations).
        warnings.filterwarnings("ignore", message=".*Box observation space m.*")
        check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_spaces_and_conventions_are_as_documented(env):
    assert env.action_space.shape == (12,)
    np.testing.assert_array_equal(env.action_space.low, -np.ones(12, np.float32))
    np.testing.assert_array_equal(env.action_space.high, np.ones(12, np.float32))
    assert env.observation_space.shape == (34,)
    assert env.unwrapped.observation_names == rgym.OBSERVATION_NAMES
    assert env.observation_space.dtype == np.float32
    assert env.unwrapped.dt == 0.02  # 50 Hz policy over the 1 kHz loop
    assert env.spec.max_episode_steps == 200  # as made here; 250 (5 s) registered
    assert gym.spec(rgym.ENV_ID).max_episode_steps == 250
    assert gym.spec(rgym.WALK_ENV_ID).max_episode_steps == 1000
    obs, info = env.reset(seed=3)
    assert obs.dtype == np.float32 and obs.shape == (34,)
    terms = {"reward_healthy", "reward_height", "reward_tilt", "reward_ctrl"}
    body = {"x_position", "y_position", "height_m", "x_velocity", "y_velocity", "z_velocity"}
    assert terms | body | {"roll_deg", "pitch_deg", "yaw_deg", "steps", "domain"} == set(info)
    obs, reward, _, _, info = env.step(np.zeros(12))
    assert reward == pytest.approx(sum(info[k] for k in terms), abs=1e-12)
    # Lying on the ground, level.
    assert 0.0 < info["height_m"] < 0.2
    assert abs(info["roll_deg"]) < 10 and abs(info["pitch_deg"]) < 10
    # The IMU quaternion is a unit quaternion.
    assert abs(np.linalg.norm(obs[24:28]) - 1.0) < 1e-3


def test_the_same_seed_gives_the_same_episode_and_another_seed_another(env):
    rng = np.random.default_rng(0)
    actions = [rng.uniform(-1, 1, 12).astype(np.float32) for _ in range(50)]
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
    env = gym.make(
        "rtloop/Quadruped-v0", program=rtloop_bin, max_episode_steps=3000, cycles_per_step=1,
        action_mode="position", reset_noise_scale=0.0,
    )
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


def test_delta_actions_hold_the_pose_at_zero_and_ramp_the_robot_up(rtloop_bin):
    """action_mode="delta": the zero action holds where the joints were after reset; +-1
    moves each target by action_scale per step, kept in the joint's range; a constant
    action toward the stand pose (a ramp) stands the robot up, which a jump does not."""
    with pytest.raises(ValueError, match="action_scale"):
        rgym.QuadrupedEnv(action_mode="delta", action_scale=float("nan"))
    env = gym.make("rtloop/Quadruped-v0", program=rtloop_bin, action_mode="delta", reset_noise_scale=0.0)
    try:
        assert env.action_space.low.min() == -1.0 and env.action_space.high.max() == 1.0
        # The targets the actions move are observed, after the 34 readings.
        u = env.unwrapped
        assert env.observation_space.shape == (46,)
        assert u.observation_names[34:] == tuple(f"target[{i}]" for i in range(12))
        obs, _ = env.reset(seed=3)
        lying = obs[:12].astype(np.float64)
        # Where the joints are, kept in their range (lying folds the knees past 0.46 rev).
        np.testing.assert_allclose(obs[34:], np.clip(lying, rgym.ACTION_LOW, rgym.ACTION_HIGH), atol=1e-6)
        for _ in range(25):
            obs, *_ = env.step(np.zeros(12))
        np.testing.assert_allclose(obs[:12], lying, atol=0.01)
        before = u._last_targets.copy()
        obs, *_ = env.step(np.ones(12))
        np.testing.assert_allclose(u._last_targets, np.minimum(before + 0.02, rgym.ACTION_HIGH), atol=1e-6)
        np.testing.assert_allclose(obs[34:], u._last_targets, atol=1e-6)
        for _ in range(100):
            env.step(np.ones(12))
        np.testing.assert_allclose(u._last_targets, rgym.ACTION_HIGH, atol=1e-6)

        # A ramp: one constant action for 30 steps (0.6 s) takes every target to the stand
        # pose together; then the zero action holds it.
        obs, _ = env.reset(seed=3)
        stand = np.tile(rgym.STAND_POSE, 4)
        ramp = (stand - u._last_targets) / (30 * 0.02)
        assert np.abs(ramp).max() <= 1.0
        for k in range(100):
            obs, reward, terminated, truncated, info = env.step(ramp if k < 30 else np.zeros(12))
            assert not terminated, info
        np.testing.assert_allclose(u._last_targets, stand, atol=1e-6)
        assert info["height_m"] > 0.3 and abs(info["pitch_deg"]) < 5, info
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
    with pytest.raises(ValueError, match="action_mode"):
        rgym.QuadrupedEnv(action_mode="torque")
    with pytest.raises(ValueError, match="healthy_z_range"):
        rgym.QuadrupedEnv(healthy_z_range=(0.5, 0.1))
    with pytest.raises(ValueError, match="unknown keys"):
        rgym.QuadrupedEnv(domain_randomization={"gravity": (1, 2)})
    with pytest.raises(ValueError, match="friction_scale"):
        rgym.QuadrupedEnv(domain_randomization={"friction_scale": (0.0, float("nan"))})
    for bad in (float("nan"), float("inf"), 0.0, 9.0):
        with pytest.raises(ValueError, match="velocity_limit .*0.01 to 8.*None for no limit"):
            rgym.QuadrupedEnv(velocity_limit=bad)
    with pytest.raises(ValueError, match="accel_limit"):
        rgym.QuadrupedEnv(accel_limit=-1.0)


def test_commands_the_spine_refuses_are_never_trained_on_silently(rtloop_bin):
    """maximum_torque above the run's [gains] maximum_torque (8 N·m for the built-in robot)
    passes the environment's own check (a run file may allow up to 100), but the spine
    refuses every command and runs its safe command: the step says so instead of returning
    a lying robot as the action's outcome."""
    env = gym.make(rgym.ENV_ID, program=rtloop_bin, maximum_torque=20.0)
    try:
        env.reset(seed=1)
        with pytest.raises(RuntimeError, match=r"refused this step's commands \(240 servo commands over its 20 cycles\).*maximum_torque = 20.0"):
            env.step(np.zeros(12))
    finally:
        env.close()


def test_bad_actions_are_refused_in_one_sentence(env):
    env.reset(seed=1)
    for bad, words in (
        (np.zeros((3, 4)), r"shape \(3, 4\); give shape \(12,\)"),
        (np.zeros(11), r"shape \(11,\)"),
        (np.full(12, np.nan), "NaN or infinite"),
        (np.r_[np.zeros(11), np.inf], "NaN or infinite"),
    ):
        with pytest.raises(ValueError, match=words):
            env.step(bad)
    # Refused actions sent nothing: the environment goes on.
    env.step(np.zeros(12))


def test_pauses_change_nothing_bit_for_bit(rtloop_bin):
    """A learner that pauses (far beyond the spine's 100 ms agent timeout) before resets
    and steps gets exactly the run it gets without pausing."""
    rng = np.random.default_rng(5)
    actions = [rng.uniform(-1, 1, 12) for _ in range(30)]

    def run(pause_s):
        env = gym.make(rgym.ENV_ID, program=rtloop_bin, cycles_per_step=5, domain_randomization=True)
        out = []
        try:
            for episode in range(2):
                if pause_s:
                    time.sleep(pause_s)
                obs, info = env.reset(seed=40 + episode)
                out.append(np.r_[obs, 0.0, 0.0])
                for k, a in enumerate(actions):
                    if pause_s and k % 10 == 3:
                        time.sleep(pause_s)
                    obs, reward, terminated, truncated, info = env.step(a)
                    out.append(np.r_[obs, reward, terminated])
            assert env.unwrapped._agent.state().timeouts == 0
        finally:
            env.close()
        return np.array(out)

    np.testing.assert_array_equal(run(0.0), run(0.35))


def _reference(rtloop_bin, seed, actions, episode_steps, same_step):
    """One environment stepped by hand as a vector env's autoreset would: the observations
    the vector env returns for it."""
    env = gym.make(rgym.ENV_ID, program=rtloop_bin, cycles_per_step=5, max_episode_steps=episode_steps)
    out = []
    try:
        obs, _ = env.reset(seed=seed)
        out.append(obs)
        done = False
        for a in actions:
            if done and not same_step:
                obs, _ = env.reset()  # NEXT_STEP: this step only resets
                done = False
            else:
                obs, reward, terminated, truncated, _ = env.step(a)
                done = terminated or truncated
                if done and same_step:
                    obs, _ = env.reset()  # SAME_STEP: the reset's observation in its place
                    done = False
            out.append(obs)
    finally:
        env.close()
    return np.array(out)


@pytest.mark.parametrize(
    "vector, mode",
    [("sync", "NEXT_STEP"), ("sync", "SAME_STEP"), ("async", "NEXT_STEP"), ("async", "SAME_STEP")],
)
def test_vector_envs_match_their_single_env_references(rtloop_bin, vector, mode):
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

    n, episode_steps, steps = 2, 7, 24
    # Episodes end a step apart in the two envs (7 and 8 steps), and resets come while the
    # other env waits: the pauses a vector env makes.
    lengths = [episode_steps, episode_steps + 1]

    def make(k):
        return lambda: gym.make(
            rgym.ENV_ID, program=rtloop_bin, cycles_per_step=5, max_episode_steps=lengths[k]
        )

    cls = SyncVectorEnv if vector == "sync" else AsyncVectorEnv
    venv = cls([make(k) for k in range(n)], autoreset_mode=getattr(AutoresetMode, mode))
    rng = np.random.default_rng(9)
    actions = rng.uniform(-1, 1, (steps, n, 12))
    got = []
    try:
        obs, _ = venv.reset(seed=100)
        got.append(obs)
        for a in actions:
            obs, *_ = venv.step(a)
            got.append(obs)
    finally:
        venv.close()
    got = np.array(got)
    for k in range(n):
        want = _reference(rtloop_bin, 100 + k, actions[:, k], lengths[k], mode == "SAME_STEP")
        np.testing.assert_array_equal(got[:, k], want, err_msg=f"env {k} ({vector}, {mode})")


def test_record_episode_statistics_counts_the_episodes(rtloop_bin):
    env = gym.wrappers.RecordEpisodeStatistics(gym.make(rgym.ENV_ID, program=rtloop_bin, max_episode_steps=5))
    try:
        env.reset(seed=1)
        for _ in range(5):
            *_, truncated, info = env.step(np.zeros(12))
        assert truncated and info["episode"]["l"] == 5
        assert np.isfinite(info["episode"]["r"])
    finally:
        env.close()


def test_a_dead_spine_is_noticed_at_once_with_its_own_words(rtloop_bin):
    env = gym.make(rgym.ENV_ID, program=rtloop_bin)
    try:
        env.reset(seed=1)
        os.kill(env.unwrapped.spine_pid, signal.SIGKILL)  # a zombie until the env reaps it
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match=r"spine ended \(status -9\)"):
            env.step(np.zeros(12))
        assert time.monotonic() - t0 < 5.0
    finally:
        env.close()
    # A spine that ends by itself: what it said reaches the exception, intact.
    env = gym.make(rgym.ENV_ID, program=rtloop_bin, spine_args=["--duration", "1.5"])
    try:
        env.reset(seed=1)
        with pytest.raises(RuntimeError, match="spine ended") as raised:
            for _ in range(200):
                env.step(np.zeros(12))
        said = str(raised.value)
        # The run's summary (stdout), its last line intact, no zero bytes from a clobbered
        # file offset.
        assert said.startswith("the rtloop spine ended (status 0): ") and said.endswith("status: ok"), said
        assert "\x00" not in said, said
    finally:
        env.close()


def test_domain_randomisation_is_drawn_from_the_seed_and_changes_the_episode(rtloop_bin):
    env = gym.make(rgym.ENV_ID, program=rtloop_bin, domain_randomization={"pushes_per_episode": 1,
                   "push_window_s": (0.1, 0.1), "push_force_n": (200.0, 200.0), "push_duration_s": (0.2, 0.2)})
    try:
        _, a = env.reset(seed=3)
        _, b = env.reset(seed=3)
        _, c = env.reset(seed=4)
        for key in ("friction_scale", "mass_scale", "payload_kg", "latency_cycles"):
            assert a["domain"][key] == b["domain"][key]
        assert a["domain"]["friction_scale"] != c["domain"]["friction_scale"]
        np.testing.assert_array_equal(a["domain"]["kp_scale"], b["domain"]["kp_scale"])
        # The push (200 N for 0.2 s, 0.1 s after the reset) moves the body in every episode,
        # the second as the first.
        moved = []
        for _ in range(2):
            env.reset(seed=3)
            for _ in range(25):
                *_, info = env.step(np.zeros(12))
            moved.append(np.hypot(info["x_position"], info["y_position"]))
        assert moved[0] == moved[1]
        env.reset(seed=3)
        info0 = env.step(np.zeros(12))[-1]
        assert moved[0] > np.hypot(info0["x_position"], info0["y_position"]) + 0.05, moved
    finally:
        env.close()


def test_the_walking_task_starts_standing_and_tracks_a_command(rtloop_bin):
    env = gym.make(rgym.WALK_ENV_ID, program=rtloop_bin)
    try:
        obs, info = env.reset(seed=2)
        assert obs.shape == (37,)
        assert env.unwrapped.observation_names[-3:] == ("command.vx", "command.vy", "command.yaw_rate")
        assert info["height_m"] > 0.25, info  # stood up before the policy takes over
        np.testing.assert_array_equal(obs[-3:], info["command"].astype(np.float32))
        for _ in range(10):
            obs, reward, terminated, truncated, info = env.step(STAND_ACTION)
        assert not terminated and "reward_tracking" in info
    finally:
        env.close()


def test_a_spine_that_cannot_load_mujoco_says_so(tmp_path):
    """What an installed package meets after `cargo clean` removed the MuJoCo library the
    program links (docs/gym.md, "What the installed package depends on"): the loader's own
    sentence, not a hang."""
    fake = tmp_path / "rtloop"
    fake.write_text(
        "#!/bin/sh\n"
        "echo 'rtloop: error while loading shared libraries: libmujoco.so.3.17.0: "
        "cannot open shared object file: No such file or directory' >&2\nexit 127\n"
    )
    fake.chmod(0o755)
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"exited \(status 127\).*libmujoco\.so\.3\.17\.0: cannot open"):
        rgym.QuadrupedEnv(program=str(fake))
    assert time.monotonic() - t0 < 10


def test_a_drawn_command_latency_delays_every_command_by_its_cycles(rtloop_bin):
    def stopped_steps(latency):
        fixed = {"friction_scale": (1, 1), "mass_scale": (1, 1), "payload_kg": (0, 0), "kp_scale": (1, 1),
                 "kd_scale": (1, 1), "pushes_per_episode": 0, "latency_cycles": (latency, latency)}
        env = gym.make(rgym.ENV_ID, program=rtloop_bin, cycles_per_step=1, domain_randomization=fixed)
        try:
            _, info = env.reset(seed=1)
            assert info["domain"]["latency_cycles"] == latency
            modes = []
            for _ in range(10):
                env.step(np.zeros(12))
                modes.append(int(env.unwrapped._state.mode[0]))
        finally:
            env.close()
        assert modes[-1] == 10, modes  # position mode once the commands arrive
        return modes.index(10)

    assert stopped_steps(4) == stopped_steps(0) + 4


def _training_example():
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_stand.py"
    spec = importlib.util.spec_from_file_location("train_stand", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return path, module


def test_the_training_examples_check_tells_standing_from_a_crouch(rtloop_bin):
    """python/examples/train_stand.py's pass mark: the zero action (the middle of every
    joint's range) gets up into a crouch, which does not pass; the stand pose held as the
    action, ramped by the servos' velocity limit the example sets, does."""
    _, example = _training_example()
    crouch = example.evaluate(lambda obs: np.zeros(12, np.float32), [1000], program=rtloop_bin)[0]
    assert not crouch["fell"] and 0.15 < crouch["height"] < 0.28, crouch
    assert not example.stands(crouch)
    held = example.evaluate(lambda obs: STAND_ACTION, [1000, 1001], program=rtloop_bin)
    assert all(example.stands(r) for r in held), held
    # Without the velocity limit the same action throws the body over.
    jumped = example.evaluate(lambda obs: STAND_ACTION, [1000], program=rtloop_bin, velocity_limit=None)
    assert not example.stands(jumped[0]), jumped


def test_the_training_example_runs_or_names_what_it_needs(rtloop_bin):
    path, _ = _training_example()
    env = dict(os.environ, RTLOOP_BIN=rtloop_bin)
    run = subprocess.run(
        [sys.executable, str(path), "--timesteps", "1000", "--envs", "1"],
        capture_output=True, text=True, timeout=600, env=env,
    )
    if importlib.util.find_spec("stable_baselines3") is None:
        assert run.returncode == 2, run
        assert "install it with pip install stable-baselines3" in run.stderr, run.stderr
        assert "Traceback" not in run.stderr, run.stderr
    else:
        # 1 000 steps teach nothing: the run completes, checks, and says it did not stand.
        assert run.returncode == 1, run
        assert "trained 1000 steps" in run.stdout and "zero action: stands in 0/5" in run.stdout, run.stdout


def test_the_default_reward_climbs_all_the_way_from_the_crouch_to_the_stand_pose(rtloop_bin):
    """Holding a pose part of the way from the crouch (the zero action) to the stand pose
    earns more the further it goes, so the way up has no valley a learner must cross. (With
    a tilt weight of 1 and an effort weight of 0.001, half-way was worth 111 against the
    crouch's 170: the body pitches 15-27° and the servos push on the way.) Rolled out as the
    training example rolls out, with its servos' velocity limit."""
    _, example = _training_example()
    episodes = [
        example.evaluate(lambda obs, part=part: STAND_ACTION * part, [1], program=rtloop_bin)[0]
        for part in (0.0, 0.5, 0.75, 1.0)
    ]
    assert not any(e["fell"] for e in episodes), episodes
    returns = [e["ret"] for e in episodes]
    assert returns == sorted(returns), returns
