"""rtloop.gym's render modes: "rgb_array" frames from MuJoCo's offscreen renderer (headless,
EGL), posed from the spine's ``body.qpos``; "human" serves the run to Foxglove."""

import socket
import warnings

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

import rtloop  # noqa: E402
import rtloop.gym as rgym  # noqa: E402
from gymnasium.utils.env_checker import check_env  # noqa: E402

SIZE = dict(width=160, height=120)


@pytest.fixture(scope="module")
def can_render():
    """MuJoCo's offscreen renderer works here (EGL): else every test skips, saying why."""
    assert hasattr(rtloop, "Renderer"), "the test package is built with its renderer (--features physics,render)"
    try:
        rtloop.Renderer(width=8, height=8)
    except rtloop.RenderUnavailable as e:
        pytest.skip(f"no offscreen rendering on this machine: {e}")


def torso(frame):
    """The orange torso's pixels: how many, and their centroid (column, row) as a fraction of
    the frame's width and height."""
    rgb = frame.astype(float)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    rows, cols = np.nonzero((r > 90) & (r > 1.5 * g) & (r > 2.5 * b))
    h, w, _ = frame.shape
    return len(rows), (cols.mean() / w if len(cols) else np.nan), (rows.mean() / h if len(rows) else np.nan)


def crouch(env, steps):
    """The zero action (every joint at the middle of its range) for `steps` steps: the
    quadruped rises from lying to a crouch (docs/gym.md)."""
    for _ in range(steps):
        env.step(np.zeros(12, np.float32))


def test_rgb_array_frames_show_the_robot_and_follow_its_state(rtloop_bin, can_render):
    env = gym.make(rgym.ENV_ID, program=rtloop_bin, render_mode="rgb_array", **SIZE)
    try:
        assert env.unwrapped.metadata["render_modes"] == ["rgb_array", "human"]
        assert env.unwrapped.metadata["render_fps"] == 1.0 / env.unwrapped.dt == 50.0
        env.reset(seed=4)
        lying = env.render()
        assert lying.dtype == np.uint8 and lying.shape == (120, 160, 3)
        # Not blank: the sky, the ground and the robot differ.
        assert lying.std() > 10.0 and len(np.unique(lying.reshape(-1, 3), axis=0)) > 50
        assert env.render().tobytes() == lying.tobytes(), "the same state, the same frame"
        start = env.unwrapped._state.body
        crouch(env, 50)
        body = env.unwrapped._state.body
        assert body.height_m > start.height_m + 0.05, (start, body)  # it rose
        assert body.qpos.shape == (19,) and abs(body.qpos[2] - body.height_m) < 1e-6, body.qpos
        risen = env.render()
        changed = np.abs(risen.astype(int) - lying.astype(int)).max(axis=2) > 30
        assert changed.mean() > 0.01, f"only {changed.mean():.4f} of the pixels changed when the robot rose"
        # The camera follows the body: the torso stays in the middle of the picture.
        for frame in (lying, risen):
            n, col, row = torso(frame)
            assert n > 0.02 * frame.shape[0] * frame.shape[1], f"{n} torso pixels"
            assert 0.25 < col < 0.75 and 0.25 < row < 0.75, (col, row)
    finally:
        env.close()
    with pytest.raises(RuntimeError, match="this environment is closed; make a new one to render"):
        env.render()


def test_two_envs_with_the_same_seed_render_the_same_frames(rtloop_bin, can_render):
    envs = [gym.make(rgym.ENV_ID, program=rtloop_bin, render_mode="rgb_array", **SIZE) for _ in range(2)]
    try:
        frames = []
        for env in envs:
            env.reset(seed=11)
            crouch(env, 10)
            frames.append(env.render())
        np.testing.assert_array_equal(frames[0], frames[1])
        envs[1].reset(seed=12)
        assert not np.array_equal(envs[1].render(), frames[0]), "another seed, another start"
    finally:
        for env in envs:
            env.close()


def test_gymnasiums_checker_passes_with_rgb_array(rtloop_bin, can_render):
    env = gym.make(rgym.ENV_ID, program=rtloop_bin, render_mode="rgb_array", **SIZE)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*Box observation space m.*")
        check_env(env.unwrapped)
    env.close()


def test_a_bad_render_request_is_refused_in_one_sentence(rtloop_bin, can_render, tmp_path):
    with pytest.raises(ValueError, match="render_mode = 'ansi': give None"):
        rgym.QuadrupedEnv(program=rtloop_bin, render_mode="ansi")
    with pytest.raises(ValueError, match="width = 0: give a frame size from 1 to 4096 pixels"):
        rgym.QuadrupedEnv(program=rtloop_bin, render_mode="rgb_array", width=0)
    with pytest.raises(ValueError, match="camera has unknown keys"):
        rgym.QuadrupedEnv(program=rtloop_bin, render_mode="rgb_array", camera={"fov": 45})
    r = rtloop.Renderer(width=16, height=16)
    assert r.nq == 19 and r.size == (16, 16) and r.model == "the built-in quadruped"
    with pytest.raises(ValueError, match="qpos has 3 values but the built-in quadruped has nq = 19"):
        r.render(np.zeros(3))
    with pytest.raises(ValueError, match="NaN or infinite"):
        r.render(np.full(19, np.nan))
    with pytest.raises(ValueError, match="elevation = 100: give degrees from -90 to 90"):
        rtloop.Renderer(elevation=100.0)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        rtloop.Renderer(str(tmp_path / "robot.xml"))


def test_human_mode_serves_the_run_to_foxglove_on_loopback(rtloop_bin, capfd):
    env = gym.make(rgym.ENV_ID, program=rtloop_bin, render_mode="human")
    try:
        url = env.unwrapped.foxglove_url
        assert url.startswith("ws://127.0.0.1:")
        assert url in capfd.readouterr().err, "the address is said once"
        env.reset(seed=1)
        assert env.render() is None
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass  # the spine listens there
    finally:
        env.close()


def test_record_video_writes_an_mp4_of_the_episode(rtloop_bin, can_render, tmp_path):
    pytest.importorskip("moviepy", reason="RecordVideo encodes with moviepy (pip install moviepy)")
    env = gym.make(rgym.ENV_ID, program=rtloop_bin, render_mode="rgb_array", max_episode_steps=25, **SIZE)
    folder = tmp_path / "videos"
    env = gym.wrappers.RecordVideo(env, str(folder), episode_trigger=lambda e: True, disable_logger=True)
    try:
        env.reset(seed=2)
        truncated = False
        while not truncated:
            *_, truncated, _ = env.step(np.zeros(12, np.float32))
    finally:
        env.close()
    videos = sorted(folder.glob("*.mp4"))
    assert [v.name for v in videos] == ["rl-video-episode-0.mp4"], videos
    from moviepy import VideoFileClip

    with VideoFileClip(str(videos[0])) as clip:
        assert tuple(clip.size) == (160, 120) and clip.fps == 50, (clip.size, clip.fps)
        # 26 frames (the reset and 25 steps) at 50 fps.
        assert abs(clip.duration - 26 / 50) < 0.03, clip.duration
        # The first frame (the reset) and the last (25 steps later) differ: the robot moved.
        first, last = clip.get_frame(0), clip.get_frame(clip.duration - 1.0 / clip.fps)
        changed = np.abs(first.astype(int) - last.astype(int)).max(axis=2) > 30
        assert changed.mean() > 0.01, changed.mean()
