"""``rtloop.gym``: the simulated quadruped as a Gymnasium environment, through the agent protocol.

Importing this module registers ``rtloop/Quadruped-v0``::

    import gymnasium as gym
    import rtloop.gym  # noqa: F401  (registers the environment)

    env = gym.make("rtloop/Quadruped-v0")
    obs, info = env.reset(seed=1)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    env.close()

It needs Gymnasium (``pip install 'rtloop[gym]'``) and the ``rtloop`` program built with
physics (``tools/mujoco``, then ``cargo build --release -p rtloop-cli --features physics``).

**One spine, many episodes.** The environment starts ONE process,
``rtloop run --physics --lockstep --agent NAME --duration 31536000`` (the built-in
12-servo quadruped on MuJoCo, simulated time waiting for the agent), and drives it as an
:class:`rtloop.Agent` — the same agent code that drives ``rtloop run --agent NAME`` on real
buses. :meth:`QuadrupedEnv.reset` asks the spine to reset the simulated world (the
protocol's reset request, ``docs/agent-protocol.md`` section 9): the body goes back to
lying on the ground, its joints perturbed by a seed drawn from the environment's
``np_random``, every servo stopped — without restarting the process
(:attr:`QuadrupedEnv.spine_pid` stays the same). Everything runs in lockstep: the same
seed and the same actions give the same observations, bit for bit.

The program is ``program=`` if given, else ``$RTLOOP_BIN``, else ``rtloop`` on ``PATH``,
else ``target/release/rtloop`` or ``target/debug/rtloop`` in the current directory or one
of its parents (:func:`find_program`).

**Spaces.**

* Action: 12 joint position targets, rev, in the servos' order (legs front-left,
  front-right, rear-left, rear-right; each abduction, hip, knee): a ``Box`` of float32
  bounded by :data:`ACTION_LOW` / :data:`ACTION_HIGH` — abduction ±0.14, hip ±0.4, knee
  -0.03 to 0.46 rev (the model's joint ranges). Values outside are clipped. Each target is
  sent as a moteus position command (mode 10) with velocity 0, ``kp_scale`` and
  ``kd_scale`` (default 1: the servo's own gains), ``maximum_torque`` (default 8 N·m) and a
  watchdog of ``watchdog_timeout`` (default 0.1 s).
* One :meth:`~QuadrupedEnv.step` is ``cycles_per_step`` cycles of the 1 kHz spine (default
  1: 1 ms of simulated time), the same targets sent each cycle.
* Observation (float32, shape (34,), :data:`OBSERVATION_NAMES`): joint positions (12, rev),
  joint velocities (12, rev/s), IMU attitude quaternion w, x, y, z (4), IMU rates (3, °/s),
  IMU linear acceleration (3, m/s²) — what the servos and the IMU report, in the pi3hat's
  frame (+x forward, +y right, +z down), as on the real robot.
* ``info``: the body's ground truth from the physics — ``height_m`` (above the ground),
  ``roll_deg``, ``pitch_deg`` — and ``steps``, the steps of the episode so far. (Ground
  truth is for the reward and for checks; a policy that must run on a real robot uses the
  observation only.)

**Reward** (the default; subclass and override :meth:`QuadrupedEnv.reward` for another)::

    1 - 5·|height_m - 0.335| - (|roll| + |pitch|, rad) - 0.001·Σ torque²  (N·m, per servo)

highest when the body is level at the standing height of 0.335 m (the stand pose: abduction 0,
hip -0.1, knee 0.2 rev) with little effort.

**Episode end.** ``terminated`` when the body fell over: ``|roll|`` or ``|pitch|`` beyond 45°
(lying on its belly, the starting pose, is not a fall: the body's origin is then 0.05 m up).
``truncated`` after ``max_episode_steps`` steps: 1000 as registered, ``gym.make(ENV_ID,
max_episode_steps=N)`` for another (Gymnasium's ``TimeLimit``; a :class:`QuadrupedEnv` made
directly never truncates — wrap it in ``gymnasium.wrappers.TimeLimit``).

**Closing.** :meth:`~QuadrupedEnv.close` detaches and stops the spine (SIGTERM; SIGKILL
if it has not ended within 5 s); an environment that is never closed stops its spine when
it is garbage-collected or the interpreter exits.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import tempfile
import time
import weakref
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

try:
    import gymnasium as gym
    from gymnasium import spaces
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "rtloop.gym needs Gymnasium; install it with pip install 'rtloop[gym]' (or pip install gymnasium)"
    ) from e

from .agent import Agent, AgentState, SpineGone
from .program import find_program

__all__ = [
    "QuadrupedEnv",
    "find_program",
    "ENV_ID",
    "ACTION_LOW",
    "ACTION_HIGH",
    "STAND_POSE",
    "STAND_HEIGHT_M",
    "OBSERVATION_NAMES",
]

#: The id this module registers.
ENV_ID = "rtloop/Quadruped-v0"

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

#: Beyond this roll or pitch the body has fallen over (terminated), degrees.
FALL_TILT_DEG = 45.0

#: What each observation element is.
OBSERVATION_NAMES = (
    tuple(f"position[{i}]" for i in range(JOINTS))
    + tuple(f"velocity[{i}]" for i in range(JOINTS))
    + ("imu.w", "imu.x", "imu.y", "imu.z", "rate.x", "rate.y", "rate.z", "accel.x", "accel.y", "accel.z")
)

#: Simulated seconds the spine runs for: a year (``rtloop run``'s longest), so it never
#: ends under an environment.
SPINE_DURATION_S = 31_536_000

#: How long close() waits for the spine to end after SIGTERM before it kills it, s.
CLOSE_WAIT_S = 5.0


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


class QuadrupedEnv(gym.Env):
    """The built-in quadruped on MuJoCo, stepped through a lockstep spine (see the module).

    ``QuadrupedEnv(*, program=None, cycles_per_step=1, kp_scale=1.0, kd_scale=1.0, maximum_torque=8.0, watchdog_timeout=0.1,
    spine_args=(), start_timeout=60.0, render_mode=None)``

    ``spine_args`` are added to the ``rtloop run`` command line (e.g.
    ``["--ground-tilt", "5,0"]``). ``start_timeout`` bounds, in seconds, how long the
    constructor waits for the spine to come up, and every wait for a state.

    Raises:
        FileNotFoundError: no ``rtloop`` program (:func:`find_program`).
        ValueError: an argument out of range.
        RuntimeError: the spine did not start (its one-sentence reason, e.g. a program built
            without physics), or stopped answering.
    """

    metadata: Dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        *,
        program: Optional[str] = None,
        cycles_per_step: int = 1,
        kp_scale: float = 1.0,
        kd_scale: float = 1.0,
        maximum_torque: float = 8.0,
        watchdog_timeout: float = 0.1,
        spine_args: Sequence[str] = (),
        start_timeout: float = 60.0,
        render_mode: Optional[str] = None,
    ) -> None:
        if render_mode is not None:
            raise ValueError(f"render_mode {render_mode!r} is not supported; leave it None")
        if not (isinstance(cycles_per_step, int) and 1 <= cycles_per_step <= 1000):
            raise ValueError(f"cycles_per_step = {cycles_per_step!r}: give an integer from 1 to 1000")
        if not (math.isfinite(start_timeout) and 0.0 < start_timeout <= 3600.0):
            raise ValueError(f"start_timeout = {start_timeout!r} s: give 0 to 3600 seconds")
        self.render_mode = None
        self.cycles_per_step = cycles_per_step
        self._gains = dict(
            velocity=0.0,
            kp_scale=float(kp_scale),
            kd_scale=float(kd_scale),
            maximum_torque=float(maximum_torque),
            watchdog_timeout=float(watchdog_timeout),
        )
        self._timeout = float(start_timeout)
        self.action_space = spaces.Box(ACTION_LOW, ACTION_HIGH, dtype=np.float32)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(len(OBSERVATION_NAMES),), dtype=np.float32)
        self._low = ACTION_LOW.astype(np.float64)
        self._high = ACTION_HIGH.astype(np.float64)
        self._agent: Optional[Agent] = None
        self._state: Optional[AgentState] = None
        self._steps = 0
        self._process: Optional[subprocess.Popen] = None

        name = f"gym-{os.getpid()}-{id(self) & 0xFFFFFF:x}"
        args = [
            find_program(program),
            "run",
            "--physics",
            "--lockstep",
            "--quiet",
            "--agent",
            name,
            "--duration",
            str(SPINE_DURATION_S),
            "--agent-wait",
            str(int(math.ceil(self._timeout))),
            *spine_args,
        ]
        self._log = tempfile.TemporaryFile(prefix="rtloop-gym-")
        self._process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log)
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

    # --- the spine --------------------------------------------------------------------

    @property
    def spine_pid(self) -> int:
        """The process id of the spine (the same for every episode)."""
        assert self._process is not None
        return self._process.pid

    def _spine_said(self) -> str:
        """What the spine wrote on stderr (its one-sentence reason when it stopped)."""
        try:
            self._log.seek(0)
            text = self._log.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""
        lines = [line for line in text.splitlines() if not line.startswith("rtloop run: waiting for agent")]
        return "; ".join(lines[-3:])

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

    def _next(self) -> AgentState:
        """The next state, within the timeout; a spine that ended or went silent raises."""
        try:
            state = self._agent.wait_next(self._timeout)
        except SpineGone as gone:
            if gone.reason == "lost":
                raise self._failed(str(gone)) from None
            raise self._failed("the rtloop spine ended") from None
        if state is None:
            raise self._failed(f"the rtloop spine published nothing for {self._timeout} s")
        return state

    # --- Gymnasium --------------------------------------------------------------------

    def _observation(self, state: AgentState) -> np.ndarray:
        imu = state.imu
        return np.concatenate(
            (state.position, state.velocity, imu.quaternion, imu.rate_dps, imu.accel_mps2)
        ).astype(np.float32)

    @staticmethod
    def _info(state: AgentState, steps: int) -> Dict[str, Any]:
        body = state.body
        return {
            "height_m": body.height_m,
            "roll_deg": body.roll_deg,
            "pitch_deg": body.pitch_deg,
            "steps": steps,
        }

    def reward(self, state: AgentState) -> float:
        """The default reward of a state (see the module): upright, at standing height,
        with little effort."""
        body = state.body
        tilt = math.radians(abs(body.roll_deg)) + math.radians(abs(body.pitch_deg))
        effort = float(np.sum(np.square(state.torque)))
        return 1.0 - 5.0 * abs(body.height_m - STAND_HEIGHT_M) - tilt - 1e-3 * effort

    @staticmethod
    def fell(state: AgentState) -> bool:
        """Whether the body fell over (the episode is terminated)."""
        body = state.body
        return abs(body.roll_deg) > FALL_TILT_DEG or abs(body.pitch_deg) > FALL_TILT_DEG

    def reset(
        self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None
    ) -> Tuple[np.ndarray, Dict[str, Any]]:
        """Start an episode: the spine resets the simulated world (lying on the ground, the
        joints perturbed by a seed drawn from ``np_random``, every servo stopped) in the same
        process. ``seed`` seeds ``np_random`` (Gymnasium's rule): the same seed, the same
        episode. Returns the first observation and ``info``."""
        super().reset(seed=seed)
        if self._agent is None:
            raise RuntimeError("this environment is closed; make a new one")
        spine_seed = int(self.np_random.integers(1, 2**63))
        request = self._agent.request_reset(spine_seed)
        # A stop for every servo carries the request; the spine stops them all anyway.
        self._agent.command(kind="stop")
        state = self._next()
        while state.reset_ack != request:
            self._agent.heartbeat()
            state = self._next()
        if state.reset_result != "done":
            raise self._failed(f"the spine refused the reset ({state.reset_result})")
        self._state = state
        self._steps = 0
        return self._observation(state), self._info(state, 0)

    def step(self, action: Any) -> Tuple[np.ndarray, float, bool, bool, Dict[str, Any]]:
        """Send the 12 joint targets (rev, clipped to the action space) for
        ``cycles_per_step`` cycles; returns observation, reward, terminated, truncated,
        info."""
        if self._agent is None:
            raise RuntimeError("this environment is closed; make a new one")
        targets = np.clip(np.asarray(action, dtype=np.float64).reshape(JOINTS), self._low, self._high)
        state = self._state
        for _ in range(self.cycles_per_step):
            self._agent.command(position=targets, **self._gains)
            state = self._next()
        self._state = state
        self._steps += 1
        terminated = self.fell(state)
        return (
            self._observation(state),
            self.reward(state),
            terminated,
            False,
            self._info(state, self._steps),
        )

    def close(self) -> None:
        """Detach and stop the spine (SIGTERM, then SIGKILL after 5 s). Idempotent."""
        agent, self._agent = self._agent, None
        if agent is not None:
            agent.close()
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="rtloop.gym:QuadrupedEnv", max_episode_steps=1000)
