"""Type stubs of the native extension ``rtloop._rtloop`` (users import from ``rtloop``)."""

__version__: str

# --- robot (python/src/robot.rs) ---



# --- agent (python/src/agent.rs) ---

from typing import Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

_Values = Union[float, Sequence[float], npt.NDArray[np.floating], npt.NDArray[np.integer]]

class SpineNotFound(FileNotFoundError):
    """No spine is running with this agent name (``.filename``: the segment's path)."""

class ProtocolVersionError(RuntimeError):
    """The spine speaks another version of the agent protocol."""

    spine_version: int
    agent_version: int

class AgentBusy(RuntimeError):
    """Another live agent process is attached to this spine."""

    pid: int

class SpineGone(RuntimeError):
    """The spine went away: ``reason`` is "ended", "unlinked" or "dead"."""

    reason: str

class ImuState:
    """The IMU part of a state (copies)."""

    @property
    def quaternion(self) -> npt.NDArray[np.float64]:
        """Attitude w, x, y, z, shape (4,)."""
    @property
    def rate_dps(self) -> npt.NDArray[np.float64]:
        """Body rates x, y, z, °/s, shape (3,)."""
    @property
    def accel_mps2(self) -> npt.NDArray[np.float64]:
        """Linear acceleration x, y, z, m/s², shape (3,)."""

class AgentState:
    """One published state, copied out of shared memory (never a view of it)."""

    @property
    def cycle(self) -> int:
        """The spine's cycle index."""
    @property
    def time(self) -> float:
        """Time since the run started, s."""
    @property
    def stamp_ns(self) -> int:
        """CLOCK_MONOTONIC when the spine published this state, ns."""
    @property
    def status(self) -> str:
        """ "waiting", "following", "safe", "shutting_down" or "ended" ("none" before the first)."""
    @property
    def armed(self) -> bool:
        """Whether the spine follows this agent (status "following")."""
    @property
    def arm_token(self) -> int:
        """The arm token the spine publishes."""
    @property
    def timeouts(self) -> int:
        """Agent timeouts so far."""
    @property
    def rearms(self) -> int:
        """Armings so far (the first one counts)."""
    @property
    def rejected(self) -> int:
        """Servo commands the spine refused so far."""
    @property
    def torn(self) -> int:
        """Command reads the spine gave up on so far."""
    @property
    def servo_count(self) -> int:
        """Length of every per-servo array."""
    @property
    def mode(self) -> npt.NDArray[np.int32]:
        """moteus mode per servo (-1 before it answered)."""
    @property
    def fault(self) -> npt.NDArray[np.int32]:
        """moteus fault code per servo (-1 before it answered)."""
    @property
    def fresh(self) -> npt.NDArray[np.bool_]:
        """Whether each state answers this cycle's request."""
    @property
    def request_cycle(self) -> npt.NDArray[np.int64]:
        """The cycle whose request each state answers (-1 before the first answer)."""
    @property
    def age_cycles(self) -> npt.NDArray[np.int64]:
        """Cycles since each state was fresh (-1 before the first answer)."""
    @property
    def position(self) -> npt.NDArray[np.float64]:
        """Position per servo, rev."""
    @property
    def velocity(self) -> npt.NDArray[np.float64]:
        """Velocity per servo, rev/s."""
    @property
    def torque(self) -> npt.NDArray[np.float64]:
        """Torque per servo, N·m."""
    @property
    def q_current(self) -> npt.NDArray[np.float64]:
        """Q-axis current per servo, A."""
    @property
    def d_current(self) -> npt.NDArray[np.float64]:
        """D-axis current per servo, A."""
    @property
    def motor_temperature(self) -> npt.NDArray[np.float64]:
        """Motor temperature per servo, °C."""
    @property
    def temperature(self) -> npt.NDArray[np.float64]:
        """Board temperature per servo, °C."""
    @property
    def voltage(self) -> npt.NDArray[np.float64]:
        """Supply voltage per servo, V."""
    @property
    def imu(self) -> Optional[ImuState]:
        """The IMU, or None when the robot has none."""

class Agent:
    """The native agent (``rtloop.Agent`` subclasses it)."""

    def __init__(self, name: str, *, wait: float = 5.0, auto_arm: bool = True, busy_poll: Optional[bool] = None) -> None:
        """Attach to ``/dev/shm/rtloop-NAME``, retrying for up to ``wait`` s."""
    @property
    def name(self) -> str:
        """The agent name."""
    @property
    def servo_count(self) -> int:
        """Number of servos."""
    @property
    def ids(self) -> npt.NDArray[np.int64]:
        """CAN id of each servo slot."""
    @property
    def buses(self) -> npt.NDArray[np.int64]:
        """Bus number of each servo slot."""
    @property
    def rate_hz(self) -> float:
        """The spine's cycle rate, Hz."""
    @property
    def period(self) -> float:
        """The spine's cycle period, s."""
    @property
    def timeout(self) -> float:
        """The agent liveness timeout, s."""
    @property
    def lockstep(self) -> bool:
        """Whether the spine runs in lockstep."""
    @property
    def spine_pid(self) -> int:
        """The spine's process id."""
    @property
    def auto_arm(self) -> bool:
        """Whether command() re-arms the spine by itself."""
    @property
    def busy_poll(self) -> bool:
        """Whether waits spin instead of sleeping."""
    @property
    def closed(self) -> bool:
        """Whether the agent was closed."""
    def state(self) -> AgentState:
        """The newest state, now (no wait)."""
    def wait_next(self, timeout: Optional[float] = None) -> Optional[AgentState]:
        """The next state with a newer cycle; None after ``timeout`` s."""
    def command(
        self,
        *,
        position: Optional[_Values] = None,
        velocity: Optional[_Values] = None,
        feedforward_torque: Optional[_Values] = None,
        kp_scale: Optional[_Values] = None,
        kd_scale: Optional[_Values] = None,
        maximum_torque: Optional[_Values] = None,
        stop_position: Optional[_Values] = None,
        watchdog_timeout: Optional[_Values] = None,
        velocity_limit: Optional[_Values] = None,
        accel_limit: Optional[_Values] = None,
        kind: Union[str, Sequence[str], None] = "position",
    ) -> int:
        """Write one command for every servo; returns its heartbeat number."""
    def heartbeat(self) -> int:
        """Send the last command again (proof of life); returns its heartbeat number."""
    def arm(self) -> bool:
        """Echo the spine's arm token if it waits to be armed; True if it did."""
    def close(self) -> None:
        """Detach from the spine."""


# --- tlog (python/src/tlog.rs) ---



# --- sim (python/src/sim.rs) ---



# --- frame (python/src/frame.rs) ---
