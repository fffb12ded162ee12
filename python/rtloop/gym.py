"""``rtloop.gym``: the simulated quadruped as Gymnasium environments, through the agent protocol.

Importing this module registers ``rtloop/Quadruped-v0`` (stand up from lying, then stand)
and ``rtloop/QuadrupedWalk-v0`` (track a commanded velocity)::

    import gymnasium as gym
    import rtloop.gym  # noqa: F401  (registers the environments)

    env = gym.make("rtloop/Quadruped-v0")
    obs, info = env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    env.close()

It needs Gymnasium and the ``rtloop`` program built with physics (``docs/gym.md``: how to
install both).

**One spine, many episodes.** An environment starts ONE process,
``rtloop run --physics --lockstep --agent NAME`` (the built-in 12-servo quadruped on
MuJoCo, simulated time waiting for the agent), and drives it as an :class:`rtloop.Agent` —
the same agent code that drives ``rtloop run --agent NAME`` on real buses. :meth:`reset`
asks the spine to reset the simulated world (``docs/agent-protocol.md`` section 9) without
restarting the process (:attr:`QuadrupedEnv.spine_pid` stays the same).

**Time.** The spine's servo loop runs at 1 kHz; the policy acts every ``cycles_per_step``
cycles (default 20: 50 Hz, what legged RL commonly uses over a fast PD loop), so
:attr:`dt` is 0.02 s. Each action is one position command held by the spine over those
cycles (the protocol's ``hold_cycles``, as a real robot's spine keeps applying the last
command), so stepping costs one hand-off per step, not one per cycle. Simulated time
waits for the learner however long it pauses between steps (a policy update, other
environments of a vector env resetting): the run after any pause is bit-identical to the
run without it. While it waits, neither process uses CPU (the hand-off sleeps on futexes).

**Spaces.**

* Action (``action_mode="normalized"``, the default): 12 numbers in [-1, 1], one per joint
  in the servos' order (legs front-left, front-right, rear-left, rear-right; each
  abduction, hip, knee), mapped linearly onto the joint's range — abduction ±0.14, hip
  ±0.4, knee -0.03 to 0.46 rev (:data:`ACTION_LOW`, :data:`ACTION_HIGH`).
  ``action_mode="position"``: the joint targets themselves, rev, in that range.
  ``action_mode="delta"``: 12 numbers in [-1, 1], each moving its joint's target by up to
  ``action_scale`` rev (default 0.02: 1 rev/s at 50 Hz) from the last step's target, kept
  in the joint's range; an episode's first target is where the joints are after
  :meth:`reset`, so the zero action holds the pose and a policy moves the robot at a rate
  it chooses (standing up from lying needs a ramp: a jump to the stand pose throws the
  body). Values beyond the space are clipped; an action of another shape (``(3, 4)`` included) or with
  NaN or infinite values is refused (``ValueError``). Each target is sent as a moteus
  position command (mode 10) with velocity 0, ``kp_scale`` / ``kd_scale`` (default 1: the
  servo's own gains), ``maximum_torque`` (default 8 N·m) and a watchdog; with
  ``velocity_limit`` (rev/s) and ``accel_limit`` (rev/s²), the servos move their own
  setpoints to each target within those limits (moteus's trajectory limits, a real
  servo's feature), so an absolute action becomes a smooth ramp — default None: no limit.
* Observation (float32, :data:`OBSERVATION_NAMES`): joint positions (12, rev), joint
  velocities (12, rev/s), IMU attitude quaternion w, x, y, z (4), IMU rates (3, °/s), IMU
  linear acceleration (3, m/s²) — what the servos and the IMU report, in the pi3hat's frame
  (+x forward, +y right, +z down), as on the real robot; ``action_mode="delta"`` adds the
  12 targets its actions move (rev; what the control law last commanded), then the walking
  task its velocity command (3). :attr:`QuadrupedEnv.observation_names` names every element.
* ``info``: the reward's terms (``reward_*``), the body's ground truth from the physics —
  ``x_position``, ``y_position``, ``height_m``, ``x_velocity``, ``y_velocity``,
  ``z_velocity`` (ground frame, +x forward, +y left, +z up), ``roll_deg``, ``pitch_deg``,
  ``yaw_deg`` — and ``steps`` of the episode. (Ground truth is for rewards and checks; a
  policy meant for the real robot uses the observation only.)

**Rewards** (keyword arguments set the weights; subclass and override :meth:`reward` for
another). ``Quadruped-v0``, per step::

    healthy_reward - height_weight·|height_m - 0.335| - tilt_weight·(|roll| + |pitch|, rad)
                   - ctrl_cost_weight·Σ torque²  (N·m, per servo)

with defaults 1, 2, 0.2 and 0.0002: lying on the belly (0.05 m) still earns about +0.4 a
step and standing about +1, so ending an episode early by falling over never pays (with a
height weight above 3.5 it would: a learner then learns to tip over rather than to lie and
try). Tilt and effort weigh little beside height because the way up passes through them:
between the crouch the middle of every joint's range gives (0.23 m) and the stand pose, the
body pitches by 15–27° and the servos push hard, and with a tilt weight of 1 and an effort
weight of 0.001 those postures were worth less than the crouch, which then held PPO.

``QuadrupedWalk-v0``::

    healthy_reward + tracking_weight·exp(-|v_xy - command_xy|² / 0.25)
                   + yaw_tracking_weight·exp(-(yaw_rate - command_yaw)² / 0.25)
                   - tilt_weight·(|roll| + |pitch|) - ctrl_cost_weight·Σ torque²

**Episode end.** ``terminated`` when the body is no longer healthy: ``|roll|`` or
``|pitch|`` beyond ``healthy_tilt_deg`` (45°), or, for the walking task, the height
outside ``healthy_z_range`` (lying on its belly — the standing task's start — is healthy
there). ``terminate_when_unhealthy=False`` never terminates. ``truncated`` after
``max_episode_steps``: 250 steps (5 s) for standing up, 1000 (20 s) for walking.

**Starts and domain randomisation**, all drawn from the environment's ``np_random`` (so
``reset(seed=...)`` reproduces them, bit for bit): ``reset_noise_scale`` (rad, default
0.1) offsets every joint from the settled pose; ``domain_randomization=True`` (or a dict
overriding :data:`DOMAIN_RANGES`) draws per episode the friction, the masses and a
payload, each servo's position and velocity gains, a command latency, and pushes on the
body at random times of the episode. The values drawn are in ``info["domain"]`` after
:meth:`reset`. Pushes given with ``spine_args=["--push", ...]`` start again with every
episode.

**Dead spine.** A spine that ends or dies is noticed at once (its process is watched, a
zombie included): the next :meth:`step` or :meth:`reset` raises ``RuntimeError`` with
what the spine said (its stderr and summary, read without moving the spine's file offset).

**Rendering.** ``render_mode="rgb_array"``: :meth:`render` returns the current state as
MuJoCo's own offscreen renderer draws it (headless, through EGL: a GPU's driver or Mesa's
software rasteriser), a uint8 array of shape (``height``, ``width``, 3) — the model the
spine simulates (the built-in quadruped, or the one ``spine_args=["--config", FILE]``
names), posed exactly from the state's ``body.qpos``, the camera following the body from
its right side (``camera=`` a dict of :class:`rtloop.Renderer`'s ``azimuth``,
``elevation``, ``distance``, ``track``). ``render_mode="human"``: the spine serves the run
live to Foxglove (``--foxglove 127.0.0.1:PORT``, loopback only; the 3D panel shows the
robot), and the environment says the address once on stderr and in :attr:`foxglove_url`;
:meth:`render` returns None. ``metadata["render_fps"]`` is ``1 / dt``.

**Closing.** :meth:`close` detaches and stops the spine (SIGTERM; SIGKILL if it has not
ended within 5 s); an environment that is never closed stops its spine when it is
garbage-collected or the interpreter exits.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from itertools import count
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np

try:
    import gymnasium as gym
    from gymnasium import spaces
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "rtloop.gym needs Gymnasium; install it with pip install gymnasium (or pip install './python[gym]' from a checkout)"
    ) from e

from .agent import Agent, AgentState, SpineGone
from .program import find_program

__all__ = [
    "QuadrupedEnv",
    "QuadrupedWalkEnv",
    "find_program",
    "ENV_ID",
    "WALK_ENV_ID",
    "ACTION_LOW",
    "ACTION_HIGH",
    "STAND_POSE",
    "STAND_HEIGHT_M",
    "OBSERVATION_NAMES",
    "DOMAIN_RANGES",
]

#: The standing task's id.
ENV_ID = "rtloop/Quadruped-v0"
#: The walking task's id.
WALK_ENV_ID = "rtloop/QuadrupedWalk-v0"

#: Joints of the built-in quadruped (its servos, in order).
JOINTS = 12

#: Lower bound of each joint target, rev (abduction, hip, knee, per leg).
ACTION_LOW = np.tile(np.array([-0.14, -0.4, -0.03], dtype=np.float32), 4)
#: Upper bound of each joint target, rev.
ACTION_HIGH = np.tile(np.array([0.14, 0.4, 0.46], dtype=np.float32), 4)

#: The stand pose of one leg, rev (abduction, hip, knee): the demo motion's
#: (``rtloop::motion::STAND_POSE``); the quadruped stands at about 0.335 m on it.
STAND_POSE = (0.0, -0.1, 0.2)

#: The standing height the default reward aims at, m.
STAND_HEIGHT_M = 0.335

#: The spine's servo loop, Hz (``rtloop run``'s default rate).
SPINE_RATE_HZ = 1000.0

#: What each observation element is (the standing task's; walking adds its command).
OBSERVATION_NAMES = (
    tuple(f"position[{i}]" for i in range(JOINTS))
    + tuple(f"velocity[{i}]" for i in range(JOINTS))
    + ("imu.w", "imu.x", "imu.y", "imu.z", "rate.x", "rate.y", "rate.z", "accel.x", "accel.y", "accel.z")
)

#: Domain randomisation's ranges (``domain_randomization=True``; a dict overrides any):
#: uniform draws per episode. ``pushes_per_episode`` pushes of ``push_force_n`` (horizontal,
#: random direction) lasting ``push_duration_s``, at random times within
#: ``push_window_s`` of the reset.
DOMAIN_RANGES: Dict[str, Any] = {
    "friction_scale": (0.5, 1.5),
    "mass_scale": (0.85, 1.15),
    "payload_kg": (0.0, 1.0),
    "kp_scale": (0.8, 1.2),
    "kd_scale": (0.8, 1.2),
    "latency_cycles": (0, 4),
    "pushes_per_episode": 2,
    "push_force_n": (0.0, 40.0),
    "push_duration_s": (0.05, 0.2),
    "push_window_s": (1.0, 15.0),
}

#: Simulated seconds the spine runs for: a year (``rtloop run``'s longest), so it never
#: ends under an environment.
SPINE_DURATION_S = 31_536_000

#: How long close() waits for the spine to end after SIGTERM before it kills it, s.
CLOSE_WAIT_S = 5.0

#: Longest wait for one state while the spine lives, s: only a bound against a spine that
#: hangs (simulated time never times out while the agent pauses).
STATE_WAIT_S = 3600.0


#: Numbers the environments of this process (their agent segments' names).
_ENV_NUMBERS = count(1)


def _stop_spine(process: subprocess.Popen, log) -> None:
    """End the spine: SIGTERM, then SIGKILL after CLOSE_WAIT_S. Never raises."""
    try:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=CLOSE_WAIT_S)
    except (OSError, subprocess.TimeoutExpired):
        pass
    finally:
        try:
            log.close()
        except OSError:
            pass


def _finite_range(name: str, value: Any, low: float, high: float) -> Tuple[float, float]:
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} = {value!r}: give a pair (low, high)") from None
    if not (math.isfinite(a) and math.isfinite(b) and low <= a <= b <= high):
        raise ValueError(f"{name} = {value!r}: give low <= high within {low} to {high}")
    return a, b


class QuadrupedEnv(gym.Env):
    """The built-in quadruped on MuJoCo, stepped through a lockstep spine: stand up from
    lying, then stand (see the module).

    Keyword arguments: ``program`` (the ``rtloop`` program), ``cycles_per_step`` (1 to
    1000 cycles of the 1 kHz loop per step; default 20), ``action_mode`` ("normalized",
    "position" or "delta"), ``action_scale`` (rev per step in "delta" mode, 0 to 0.5), ``kp_scale``, ``kd_scale`` (0 to 1), ``maximum_torque`` (N·m),
    ``velocity_limit`` (rev/s, 0.01 to 8), ``accel_limit`` (rev/s², 0.01 to 32: what int16 commands carry),
    ``healthy_reward``, ``height_weight``, ``tilt_weight``, ``ctrl_cost_weight``,
    ``healthy_tilt_deg``, ``healthy_z_range``, ``terminate_when_unhealthy``,
    ``reset_noise_scale`` (rad, 0 to 1), ``domain_randomization`` (bool or dict),
    ``spine_args`` (added to the ``rtloop run`` command line, e.g.
    ``["--ground-tilt", "5,0"]``), ``start_timeout`` (s, bounds the spine's start),
    ``render_mode`` (None, "rgb_array" or "human"; see the module), ``width``, ``height``
    (pixels of an "rgb_array" frame, 1 to 4096; default 480), ``camera`` (a dict of
    :class:`rtloop.Renderer`'s camera arguments).

    Raises:
        FileNotFoundError: no ``rtloop`` program (:func:`find_program`).
        ValueError: an argument out of range.
        RuntimeError: the spine did not start (its one-sentence reason, e.g. a program built
            without physics), or ended, or refused a step's commands (:meth:`step`: a
            ``maximum_torque`` above the run's); ``render_mode="rgb_array"`` in a package built
            without its renderer.
        rtloop.RenderUnavailable: ``render_mode="rgb_array"`` where no OpenGL context can be
            made through EGL (the sentence names the Debian packages to install).
    """

    metadata: Dict[str, Any] = {"render_modes": ["rgb_array", "human"], "render_fps": 50}

    def __init__(
        self,
        *,
        program: Optional[str] = None,
        cycles_per_step: int = 20,
        action_mode: str = "normalized",
        action_scale: float = 0.02,
        kp_scale: float = 1.0,
        kd_scale: float = 1.0,
        maximum_torque: float = 8.0,
        velocity_limit: Optional[float] = None,
        accel_limit: Optional[float] = None,
        healthy_reward: float = 1.0,
        height_weight: float = 2.0,
        tilt_weight: float = 0.2,
        ctrl_cost_weight: float = 2e-4,
        healthy_tilt_deg: float = 45.0,
        healthy_z_range: Tuple[float, float] = (0.0, 10.0),
        terminate_when_unhealthy: bool = True,
        reset_noise_scale: float = 0.1,
        domain_randomization: Union[bool, Dict[str, Any]] = False,
        spine_args: Sequence[str] = (),
        start_timeout: float = 60.0,
        render_mode: Optional[str] = None,
        width: int = 480,
        height: int = 480,
        camera: Optional[Dict[str, Any]] = None,
    ) -> None:
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(
                f"render_mode = {render_mode!r}: give None, \"rgb_array\" (frames as arrays) or \"human\" (live in Foxglove)"
            )
        for name, value in (("width", width), ("height", height)):
            if not (isinstance(value, int) and 1 <= value <= 4096):
                raise ValueError(f"{name} = {value!r}: give a frame size from 1 to 4096 pixels")
        if camera is not None and not isinstance(camera, dict):
            raise ValueError(f"camera = {camera!r}: give a dict of azimuth, elevation, distance and track")
        if not (isinstance(cycles_per_step, int) and 1 <= cycles_per_step <= 1000):
            raise ValueError(f"cycles_per_step = {cycles_per_step!r}: give an integer from 1 to 1000")
        if action_mode not in ("normalized", "position", "delta"):
            raise ValueError(f"action_mode = {action_mode!r}: give \"normalized\", \"position\" or \"delta\"")
        if not (math.isfinite(start_timeout) and 0.0 < start_timeout <= 3600.0):
            raise ValueError(f"start_timeout = {start_timeout!r} s: give 0 to 3600 seconds")
        for name, value, low, high in (
            ("action_scale", action_scale, 0.0, 0.5),
            ("kp_scale", kp_scale, 0.0, 1.0),
            ("kd_scale", kd_scale, 0.0, 1.0),
            ("maximum_torque", maximum_torque, 0.0, 100.0),
            ("healthy_tilt_deg", healthy_tilt_deg, 0.0, 180.0),
            ("reset_noise_scale", reset_noise_scale, 0.0, 1.0),
        ):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
                raise ValueError(f"{name} = {value!r}: give a number from {low} to {high}")
        # The servos' own trajectory limits (moteus's velocity_limit / accel_limit), None: none.
        limits = {}
        for name, value, low, high in (("velocity_limit", velocity_limit, 0.01, 8.0), ("accel_limit", accel_limit, 0.01, 32.0)):
            if value is None:
                continue
            if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
                raise ValueError(f"{name} = {value!r}: give a number from {low} to {high}, or None for no limit")
            limits[name] = float(value)
        for name, value in (
            ("healthy_reward", healthy_reward),
            ("height_weight", height_weight),
            ("tilt_weight", tilt_weight),
            ("ctrl_cost_weight", ctrl_cost_weight),
        ):
            if not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise ValueError(f"{name} = {value!r}: give a finite number")
        self._z_range = _finite_range("healthy_z_range", healthy_z_range, 0.0, 10.0)
        self._domain = self._domain_ranges(domain_randomization)
        self.render_mode = render_mode
        self.cycles_per_step = cycles_per_step
        # Frames at the policy's rate (RecordVideo and the checker read it).
        self.metadata = dict(self.metadata, render_fps=SPINE_RATE_HZ / cycles_per_step)
        self._renderer = None
        self.foxglove_url: Optional[str] = None
        spine_args = list(spine_args)
        if render_mode == "rgb_array":
            self._renderer = self._make_renderer(spine_args, width, height, camera or {})
        elif render_mode == "human":
            spine_args = self._foxglove(spine_args)
        self.action_mode = action_mode
        self.action_scale = float(action_scale)
        self.weights = dict(
            healthy_reward=float(healthy_reward),
            height_weight=float(height_weight),
            tilt_weight=float(tilt_weight),
            ctrl_cost_weight=float(ctrl_cost_weight),
        )
        self.healthy_tilt_deg = float(healthy_tilt_deg)
        self.terminate_when_unhealthy = bool(terminate_when_unhealthy)
        self.reset_noise_scale = float(reset_noise_scale)
        self._gains = dict(
            velocity=0.0,
            kp_scale=float(kp_scale),
            kd_scale=float(kd_scale),
            maximum_torque=float(maximum_torque),
            **limits,
            # The servo stops by itself when commands stop coming for 2 steps (never in
            # lockstep while the agent lives: simulated time waits for it).
            watchdog_timeout=min(10.0, max(0.1, 2.0 * cycles_per_step / SPINE_RATE_HZ)),
        )
        self._timeout = float(start_timeout)
        self._low = ACTION_LOW.astype(np.float64)
        self._high = ACTION_HIGH.astype(np.float64)
        # The last targets sent ("delta" mode moves them); set by every reset.
        self._last_targets = np.zeros(JOINTS)
        if action_mode in ("normalized", "delta"):
            self.action_space = spaces.Box(-1.0, 1.0, shape=(JOINTS,), dtype=np.float32)
        else:
            self.action_space = spaces.Box(ACTION_LOW, ACTION_HIGH, dtype=np.float32)
        #: What each element of this environment's observation is.
        self.observation_names: Tuple[str, ...] = OBSERVATION_NAMES + self._extra_observation_names()
        n_obs = len(self.observation_names)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(n_obs,), dtype=np.float32)
        self._agent: Optional[Agent] = None
        self._state: Optional[AgentState] = None
        self._steps = 0
        self._episode_domain: Dict[str, Any] = {}
        self._process: Optional[subprocess.Popen] = None

        # Unique for the process's life: id(self) is reused once an env is collected, and a
        # new spine under an old env's name met that env's segment (or its removal).
        name = f"gym-{os.getpid()}-{next(_ENV_NUMBERS)}"
        args = [
            find_program(program),
            "run",
            "--physics",
            "--lockstep",
            "--agent",
            name,
            *(() if "--duration" in spine_args else ("--duration", str(SPINE_DURATION_S))),
            "--agent-wait",
            str(int(math.ceil(self._timeout))),
            *spine_args,
        ]
        # The spine's stderr and its summary (stdout) go to one file opened for appending:
        # every write lands at its end whatever the file offset, and this side reads it
        # with pread, which moves no offset — so what the spine said stays intact.
        self._log = tempfile.TemporaryFile(prefix="rtloop-gym-", mode="a+b")
        self._process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)
        self._finalizer = weakref.finalize(self, _stop_spine, self._process, self._log)
        try:
            self._agent = self._attach(name)
            # The first state the spine waits on: every servo measured.
            state = self._next()
            while not (state.request_cycle >= 0).all():
                self._agent.heartbeat()
                state = self._next()
            self._state = state
        except BaseException:
            self.close()
            raise

    # --- configuration ----------------------------------------------------------------

    @staticmethod
    def _make_renderer(spine_args: Sequence[str], width: int, height: int, camera: Dict[str, Any]):
        """MuJoCo's offscreen renderer of the model the spine will simulate."""
        try:
            from ._rtloop import Renderer
        except ImportError:
            raise RuntimeError(
                "render_mode=\"rgb_array\" needs the rtloop package built with its renderer: "
                "MATURIN_PEP517_ARGS=\"--features physics,render\" pip install './python[gym]' (docs/gym.md)"
            ) from None
        unknown = set(camera) - {"azimuth", "elevation", "distance", "track"}
        if unknown:
            raise ValueError(f"camera has unknown keys {sorted(unknown)}; give any of azimuth, elevation, distance, track")
        args = list(spine_args)
        config = args[args.index("--config") + 1] if "--config" in args[:-1] else None
        return Renderer(config=config, width=width, height=height, **camera)

    def _foxglove(self, spine_args: list) -> list:
        """``render_mode="human"``: the spine serves the run to Foxglove on a loopback port
        (the one ``spine_args`` give with ``--foxglove``, else a free one); said once."""
        if "--foxglove" in spine_args[:-1]:
            address = spine_args[spine_args.index("--foxglove") + 1]
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                address = f"127.0.0.1:{s.getsockname()[1]}"
            spine_args = [*spine_args, "--foxglove", address]
        self.foxglove_url = f"ws://{address}"
        print(
            f"rtloop.gym: watch the robot live in Foxglove: Open connection, Foxglove WebSocket, {self.foxglove_url}",
            file=sys.stderr,
        )
        return spine_args

    def _extra_observation_names(self) -> Tuple[str, ...]:
        # "delta" mode keeps state of its own, the targets its actions move: the policy sees
        # them (as a real robot's control law knows what it last commanded), or the same
        # observation could follow targets pressed far into the ground or not at all.
        if self.action_mode == "delta":
            return tuple(f"target[{i}]" for i in range(JOINTS))
        return ()

    @staticmethod
    def _domain_ranges(given: Union[bool, Dict[str, Any]]) -> Optional[Dict[str, Any]]:
        if given is False or given is None:
            return None
        ranges = dict(DOMAIN_RANGES)
        if isinstance(given, dict):
            unknown = set(given) - set(DOMAIN_RANGES)
            if unknown:
                raise ValueError(
                    f"domain_randomization has unknown keys {sorted(unknown)}; give any of {sorted(DOMAIN_RANGES)}"
                )
            ranges.update(given)
        elif given is not True:
            raise ValueError(f"domain_randomization = {given!r}: give True, False or a dict of ranges")
        bounds = {
            "friction_scale": (0.1, 3.0),
            "mass_scale": (0.5, 2.0),
            "payload_kg": (0.0, 20.0),
            "kp_scale": (0.1, 3.0),
            "kd_scale": (0.1, 3.0),
            "latency_cycles": (0, 32),
            "push_force_n": (0.0, 1000.0),
            "push_duration_s": (0.0, 10.0),
            "push_window_s": (0.0, 86400.0),
        }
        for key, (low, high) in bounds.items():
            ranges[key] = _finite_range(f"domain_randomization[{key!r}]", ranges[key], low, high)
        pushes = ranges["pushes_per_episode"]
        if not (isinstance(pushes, int) and 0 <= pushes <= 4):
            raise ValueError(f"domain_randomization['pushes_per_episode'] = {pushes!r}: give 0 to 4")
        return ranges

    @property
    def dt(self) -> float:
        """Simulated seconds per step (``cycles_per_step`` cycles of the 1 kHz loop)."""
        return self.cycles_per_step / SPINE_RATE_HZ

    # --- the spine --------------------------------------------------------------------

    @property
    def spine_pid(self) -> int:
        """The process id of the spine (the same for every episode)."""
        assert self._process is not None
        return self._process.pid

    def _spine_said(self) -> str:
        """What the spine wrote (its one-sentence reason when it stopped, its summary)."""
        try:
            size = os.fstat(self._log.fileno()).st_size
            text = os.pread(self._log.fileno(), min(size, 1 << 16), max(0, size - (1 << 16)))
        except (OSError, ValueError):
            return ""
        lines = [
            line.strip()
            for line in text.decode("utf-8", "replace").splitlines()
            if line.strip() and not line.startswith("rtloop run: waiting for agent")
        ]
        return " | ".join(lines[-6:])

    def _failed(self, what: str) -> RuntimeError:
        said = self._spine_said()
        return RuntimeError(f"{what}{': ' + said if said else ''}")

    def _attach(self, name: str) -> Agent:
        deadline = time.monotonic() + self._timeout
        while True:
            if self._process.poll() is not None:
                raise self._failed(f"the rtloop spine exited (status {self._process.returncode}) before it came up")
            try:
                return Agent(name, wait=0.05)
            except FileNotFoundError:
                if time.monotonic() > deadline:
                    raise self._failed(f"the rtloop spine did not come up within {self._timeout} s") from None

    def _ended(self) -> RuntimeError:
        # Reap it, so its exit status is known (and it is no zombie).
        try:
            status = self._process.wait(timeout=CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            status = None
        how = f" (status {status})" if status is not None else ""
        return self._failed(f"the rtloop spine ended{how}")

    def _next(self) -> AgentState:
        """The next state the spine waits on; a spine that ended or died raises at once."""
        try:
            state = self._agent.wait_next(STATE_WAIT_S, awaited=True)
        except SpineGone as gone:
            if gone.reason == "lost":
                raise self._failed(str(gone)) from None
            raise self._ended() from None
        if state is None:
            raise self._failed(f"the rtloop spine published nothing for {STATE_WAIT_S} s")
        if state.status == "ended":
            raise self._ended()
        return state

    # --- Gymnasium --------------------------------------------------------------------

    def _observation(self, state: AgentState) -> np.ndarray:
        imu = state.imu
        parts = [state.position, state.velocity, imu.quaternion, imu.rate_dps, imu.accel_mps2]
        if self.action_mode == "delta":
            parts.append(self._last_targets)
        return np.concatenate(parts).astype(np.float32)

    def _body_info(self, state: AgentState) -> Dict[str, Any]:
        body = state.body
        p, v = body.position_m, body.velocity_mps
        return {
            "x_position": float(p[0]),
            "y_position": float(p[1]),
            "height_m": body.height_m,
            "x_velocity": float(v[0]),
            "y_velocity": float(v[1]),
            "z_velocity": float(v[2]),
            "roll_deg": body.roll_deg,
            "pitch_deg": body.pitch_deg,
            "yaw_deg": body.yaw_deg,
        }

    def reward_terms(self, state: AgentState) -> Dict[str, float]:
        """The default reward's terms for a state (see the module); they sum to the reward."""
        w = self.weights
        body = state.body
        tilt = math.radians(abs(body.roll_deg)) + math.radians(abs(body.pitch_deg))
        effort = float(np.dot(state.torque, state.torque))
        return {
            "reward_healthy": w["healthy_reward"] if self.healthy(state) else 0.0,
            "reward_height": -w["height_weight"] * abs(body.height_m - STAND_HEIGHT_M),
            "reward_tilt": -w["tilt_weight"] * tilt,
            "reward_ctrl": -w["ctrl_cost_weight"] * effort,
        }

    def reward(self, state: AgentState) -> float:
        """The reward of a state: the sum of :meth:`reward_terms`."""
        return float(sum(self.reward_terms(state).values()))

    def healthy(self, state: AgentState) -> bool:
        """Whether the body is upright enough (``healthy_tilt_deg``) at a height within
        ``healthy_z_range``."""
        body = state.body
        upright = abs(body.roll_deg) <= self.healthy_tilt_deg and abs(body.pitch_deg) <= self.healthy_tilt_deg
        return upright and self._z_range[0] <= body.height_m <= self._z_range[1]

    def fell(self, state: AgentState) -> bool:
        """Whether the episode is terminated (unhealthy, unless told not to terminate)."""
        return self.terminate_when_unhealthy and not self.healthy(state)

    def _draw_domain(self) -> Dict[str, Any]:
        """This episode's start and physical parameters, from ``np_random``."""
        rng = self.np_random
        n = JOINTS
        drawn: Dict[str, Any] = {}
        if self.reset_noise_scale > 0:
            drawn["joint_offset"] = rng.uniform(-self.reset_noise_scale, self.reset_noise_scale, n)
        r = self._domain
        if r is not None:
            drawn["friction_scale"] = float(rng.uniform(*r["friction_scale"]))
            drawn["mass_scale"] = float(rng.uniform(*r["mass_scale"]))
            drawn["payload_kg"] = float(rng.uniform(*r["payload_kg"]))
            drawn["kp_scale"] = rng.uniform(*r["kp_scale"], n)
            drawn["kd_scale"] = rng.uniform(*r["kd_scale"], n)
            lo, hi = r["latency_cycles"]
            drawn["latency_cycles"] = int(rng.integers(int(lo), int(hi) + 1))
            pushes = []
            for _ in range(r["pushes_per_episode"]):
                at = float(rng.uniform(*r["push_window_s"]))
                duration = float(rng.uniform(*r["push_duration_s"]))
                force = float(rng.uniform(*r["push_force_n"]))
                heading = float(rng.uniform(0.0, 2.0 * math.pi))
                pushes.append((at, duration, force * math.cos(heading), force * math.sin(heading), 0.0))
            drawn["pushes"] = pushes
        return drawn

    def _info(self, state: AgentState, terms: Optional[Dict[str, float]] = None) -> Dict[str, Any]:
        info = dict(terms) if terms is not None else self.reward_terms(state)
        info.update(self._body_info(state))
        info["steps"] = self._steps
        return info

    def reset(
        self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None
    ) -> Tuple[np.ndarray, Dict[str, Any]]:
        """Start an episode: the spine resets the simulated world (lying on the ground, the
        joints offset by up to ``reset_noise_scale``, the domain drawn, every servo stopped)
        in the same process. ``seed`` seeds ``np_random`` (Gymnasium's rule): the same seed,
        the same episode. Returns the first observation and ``info`` (with ``domain``: what
        was drawn)."""
        super().reset(seed=seed)
        if self._agent is None:
            raise RuntimeError("this environment is closed; make a new one")
        spine_seed = int(self.np_random.integers(1, 2**63))
        drawn = self._draw_domain()
        request = self._agent.request_reset(spine_seed, **drawn)
        # A stop for every servo carries the request; the spine stops them all anyway.
        self._agent.command(kind="stop")
        state = self._next()
        while state.reset_ack != request:
            self._agent.heartbeat()
            state = self._next()
        if state.reset_result != "done":
            raise self._failed(f"the spine refused the reset ({state.reset_result})")
        self._episode_domain = drawn
        self._state = state
        self._steps = 0
        self._on_reset()
        state = self._state
        self._last_targets = np.clip(np.asarray(state.position, dtype=np.float64), self._low, self._high)
        info = self._info(state)
        info["domain"] = drawn
        return self._observation(state), info

    def _on_reset(self) -> None:
        pass

    def _targets(self, action: Any) -> np.ndarray:
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (JOINTS,):
            raise ValueError(f"the action has shape {a.shape}; give shape ({JOINTS},), one value per joint")
        if not np.isfinite(a).all():
            raise ValueError("the action holds NaN or infinite values; give finite numbers")
        if self.action_mode == "normalized":
            a = np.clip(a, -1.0, 1.0)
            return self._low + (a + 1.0) * 0.5 * (self._high - self._low)
        if self.action_mode == "delta":
            a = self._last_targets + self.action_scale * np.clip(a, -1.0, 1.0)
        return np.clip(a, self._low, self._high)

    def step(self, action: Any) -> Tuple[np.ndarray, float, bool, bool, Dict[str, Any]]:
        """Send the 12 joint targets, held for ``cycles_per_step`` cycles; returns
        observation, reward, terminated, truncated, info."""
        if self._agent is None:
            raise RuntimeError("this environment is closed; make a new one")
        targets = self._targets(action)
        self._agent.command(position=targets, hold=self.cycles_per_step, **self._gains)
        self._last_targets = targets
        before = self._state.rejected
        state = self._next()
        self._state = state
        self._steps += 1
        if state.rejected > before:
            # The servos ran the spine's safe command, not this action: never train on that.
            raise RuntimeError(
                f"the spine refused this step's commands ({state.rejected - before} servo commands over "
                f"its {self.cycles_per_step} cycles) and gave the servos its safe command instead: a "
                "value is beyond the spine's limits "
                "(docs/agent-protocol.md section 7) — most likely maximum_torque = "
                f"{self._gains['maximum_torque']} N·m above the run's [gains] maximum_torque; give a "
                "value within it, or a run file (spine_args=[\"--config\", FILE]) that allows it"
            )
        # The terms once for both the reward and info, unless a subclass has its own reward.
        terms = self.reward_terms(state)
        if type(self).reward is QuadrupedEnv.reward:
            reward = float(sum(terms.values()))
        else:
            reward = self.reward(state)
        return (
            self._observation(state),
            reward,
            self.fell(state),
            False,
            self._info(state, terms),
        )

    def render(self) -> Optional[np.ndarray]:
        """``render_mode="rgb_array"``: the current state drawn, uint8 of shape (``height``,
        ``width``, 3). ``"human"`` (the spine streams to Foxglove as it runs) and None: None."""
        if self._renderer is None:
            if self.render_mode == "rgb_array":
                raise RuntimeError("this environment is closed; make a new one to render")
            return None
        body = self._state.body if self._state is not None else None
        qpos = body.qpos if body is not None else np.zeros(0)
        if len(qpos) == 0:
            raise RuntimeError(
                "the spine publishes no pose to render (its model has more than 64 generalised positions)"
            )
        return self._renderer.render(qpos)

    def close(self) -> None:
        """Detach and stop the spine (SIGTERM, then SIGKILL after 5 s), and free the renderer's
        OpenGL context. Idempotent."""
        agent, self._agent = self._agent, None
        self._renderer = None
        if agent is not None:
            agent.close()
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()


class QuadrupedWalkEnv(QuadrupedEnv):
    """Walk: track a velocity command (forward, sideways m/s, turning rad/s) drawn per
    episode from ``command_ranges`` (``np_random``), given in the observation's last 3
    elements. The episode starts standing: :meth:`reset` stands the robot up first
    (``stand_s`` of simulated time, a smooth ramp done by the servos' own trajectory
    limits), then hands it over. Terminated when it falls (tilt beyond ``healthy_tilt_deg``
    or height outside ``healthy_z_range``, default 0.15 to 0.6 m)."""

    def __init__(
        self,
        *,
        command_ranges: Tuple[Tuple[float, float], Tuple[float, float], Tuple[float, float]] = (
            (-0.5, 1.0),
            (-0.3, 0.3),
            (-1.0, 1.0),
        ),
        tracking_weight: float = 1.0,
        yaw_tracking_weight: float = 0.5,
        healthy_z_range: Tuple[float, float] = (0.15, 0.6),
        stand_s: float = 1.5,
        **kwargs: Any,
    ) -> None:
        try:
            ranges = tuple(_finite_range("command_ranges", r, -5.0, 5.0) for r in command_ranges)
        except TypeError:
            raise ValueError("command_ranges: give three pairs (low, high)") from None
        if len(ranges) != 3:
            raise ValueError("command_ranges: give three pairs (low, high): forward m/s, left m/s, turning rad/s")
        if not (math.isfinite(stand_s) and 0.1 <= stand_s <= 10.0):
            raise ValueError(f"stand_s = {stand_s!r}: give 0.1 to 10 seconds")
        self.command_ranges = ranges
        self.stand_s = float(stand_s)
        self.command = np.zeros(3)
        super().__init__(healthy_z_range=healthy_z_range, **kwargs)
        self.weights.update(tracking_weight=float(tracking_weight), yaw_tracking_weight=float(yaw_tracking_weight))

    def _extra_observation_names(self) -> Tuple[str, ...]:
        return super()._extra_observation_names() + ("command.vx", "command.vy", "command.yaw_rate")

    def _observation(self, state: AgentState) -> np.ndarray:
        return np.concatenate((super()._observation(state), self.command.astype(np.float32)))

    def _on_reset(self) -> None:
        self.command = np.array([self.np_random.uniform(lo, hi) for lo, hi in self.command_ranges])
        # Stand up: one command held for stand_s, the servos ramping to the stand pose
        # within their velocity and acceleration limits.
        cycles = int(round(self.stand_s * SPINE_RATE_HZ))
        stand_up = dict(self._gains, velocity_limit=0.5, accel_limit=2.0, watchdog_timeout=min(10.0, self.stand_s + 0.5))
        self._agent.command(position=np.tile(STAND_POSE, 4), hold=cycles, **stand_up)
        self._state = self._next()

    def reward_terms(self, state: AgentState) -> Dict[str, float]:
        w = self.weights
        body = state.body
        v = body.velocity_mps
        yaw = math.radians(body.yaw_deg)
        # Velocity in the body's heading frame.
        forward = math.cos(yaw) * v[0] + math.sin(yaw) * v[1]
        left = -math.sin(yaw) * v[0] + math.cos(yaw) * v[1]
        # Turning rate: the IMU's z rate (pi3hat frame: +z down, so negate for +left).
        yaw_rate = -math.radians(float(state.imu.rate_dps[2]))
        err = (forward - self.command[0]) ** 2 + (left - self.command[1]) ** 2
        tilt = math.radians(abs(body.roll_deg)) + math.radians(abs(body.pitch_deg))
        effort = float(np.dot(state.torque, state.torque))
        return {
            "reward_healthy": w["healthy_reward"] if self.healthy(state) else 0.0,
            "reward_tracking": w["tracking_weight"] * math.exp(-err / 0.25),
            "reward_yaw_tracking": w["yaw_tracking_weight"] * math.exp(-((yaw_rate - self.command[2]) ** 2) / 0.25),
            "reward_tilt": -w["tilt_weight"] * tilt,
            "reward_ctrl": -w["ctrl_cost_weight"] * effort,
        }

    def _info(self, state: AgentState, terms: Optional[Dict[str, float]] = None) -> Dict[str, Any]:
        info = super()._info(state, terms)
        info["command"] = self.command.copy()
        return info


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="rtloop.gym:QuadrupedEnv", max_episode_steps=250)
if WALK_ENV_ID not in gym.registry:
    gym.register(id=WALK_ENV_ID, entry_point="rtloop.gym:QuadrupedWalkEnv", max_episode_steps=1000)
