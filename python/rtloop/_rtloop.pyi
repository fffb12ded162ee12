"""Type stubs of the native extension ``rtloop._rtloop`` (users import from ``rtloop``)."""

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union
import os

import numpy as np
import numpy.typing as npt
from typing_extensions import TypedDict, Unpack

__version__: str

# --- robot (python/src/robot.rs) ---
# Units: positions rev, velocities rev/s, torques N·m, currents A, temperatures °C,
# voltages V, times s. A "field" argument is a scalar (every servo) or one value per servo
# in `Robot.ids` order (anything numpy converts to float64); None is not sent.

_Field = Union[float, int, npt.ArrayLike, None]

class PositionFields(TypedDict, total=False):
    """The position-mode keywords of `Command` and `Controller.make_position` /
    `set_position` (stub only: it does not exist at run time); None is not sent."""

    position: Optional[float]
    velocity: Optional[float]
    feedforward_torque: Optional[float]
    kp_scale: Optional[float]
    kd_scale: Optional[float]
    maximum_torque: Optional[float]
    stop_position: Optional[float]
    watchdog_timeout: Optional[float]
    velocity_limit: Optional[float]
    accel_limit: Optional[float]

class Command:
    """One servo's command for `Robot.cycle(commands=[...])` (see `Controller.make_*`)."""

    def __init__(
        self,
        id: int,
        *,
        bus: Optional[int] = None,
        mode: str = "position",
        **fields: Unpack[PositionFields],
    ) -> None: ...
    @property
    def id(self) -> int: ...
    @property
    def bus(self) -> Optional[int]: ...
    @property
    def mode(self) -> str: ...
    @property
    def values(self) -> Dict[str, float]: ...

class State:
    """One cycle's replies: numpy arrays with one value per servo (read-only views)."""

    @property
    def mode(self) -> npt.NDArray[np.int32]: ...
    @property
    def position(self) -> npt.NDArray[np.float64]: ...
    @property
    def velocity(self) -> npt.NDArray[np.float64]: ...
    @property
    def torque(self) -> npt.NDArray[np.float64]: ...
    @property
    def q_current(self) -> npt.NDArray[np.float64]: ...
    @property
    def d_current(self) -> npt.NDArray[np.float64]: ...
    @property
    def motor_temperature(self) -> npt.NDArray[np.float64]: ...
    @property
    def temperature(self) -> npt.NDArray[np.float64]: ...
    @property
    def voltage(self) -> npt.NDArray[np.float64]: ...
    @property
    def fault(self) -> npt.NDArray[np.int32]: ...
    @property
    def fresh(self) -> npt.NDArray[np.bool_]: ...
    @property
    def age_cycles(self) -> npt.NDArray[np.int64]: ...
    @property
    def request_cycle(self) -> npt.NDArray[np.int64]: ...
    @property
    def id(self) -> npt.NDArray[np.int32]: ...
    @property
    def bus(self) -> npt.NDArray[np.int32]: ...
    @property
    def cycle(self) -> int: ...
    @property
    def missing(self) -> int: ...
    @property
    def duration(self) -> float: ...
    @property
    def time(self) -> float: ...
    @property
    def timed_out(self) -> bool: ...
    @property
    def imu(self) -> Optional[Dict[str, Tuple[float, ...]]]: ...
    def as_array(self) -> np.ndarray: ...
    def __len__(self) -> int: ...

class Robot:
    """Every servo of a robot, commanded and queried in one call per cycle."""

    def __init__(
        self,
        config: Union[str, os.PathLike, None] = None,
        *,
        buses: Optional[Mapping[int, str]] = None,
        servos: Optional[Mapping[int, Union[Iterable[int], str]]] = None,
        wire_time: bool = True,
        clock: str = "realtime",
        period: Optional[float] = None,
        resolution: str = "int16",
        timeout: Optional[float] = None,
        limits: Optional[Mapping[str, Tuple[float, float]]] = None,
        start_position: Optional[float] = None,
        drop_rate: float = 0.0,
        seed: int = 0,
        physics: Optional[bool] = None,
        ground_tilt: Optional[Tuple[float, float]] = None,
    ) -> None: ...
    @property
    def body(self) -> Optional[Dict[str, Any]]: ...
    def push(self, force: Tuple[float, float, float], duration: float = 0.1) -> None: ...
    def cycle(
        self,
        *,
        commands: Optional[Iterable[Command]] = None,
        position: _Field = None,
        velocity: _Field = None,
        feedforward_torque: _Field = None,
        kp_scale: _Field = None,
        kd_scale: _Field = None,
        maximum_torque: _Field = None,
        stop_position: _Field = None,
        watchdog_timeout: _Field = None,
        velocity_limit: _Field = None,
        accel_limit: _Field = None,
        mode: str = "position",
    ) -> State: ...
    def query(self) -> State: ...
    def stop(self) -> State: ...
    def zero_velocity(self) -> State: ...
    def brake(self) -> State: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> "Robot": ...
    def __exit__(self, *exc: Any) -> bool: ...
    @property
    def ids(self) -> npt.NDArray[np.int64]: ...
    @property
    def buses(self) -> npt.NDArray[np.int64]: ...
    @property
    def cycle_count(self) -> int: ...
    @property
    def stats(self) -> Dict[str, int]: ...
    @property
    def limits(self) -> Dict[str, Tuple[float, float]]: ...
    @property
    def resolution(self) -> str: ...
    @property
    def period(self) -> Optional[float]: ...
    @property
    def clock(self) -> str: ...
    @property
    def time(self) -> float: ...
    def __len__(self) -> int: ...


# --- agent (python/src/agent.rs) ---

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
    """The spine went away: ``reason`` is "ended", "unlinked", "dead" or "lost" (another
    process truncated the segment under the agent; the spine ends its run too)."""

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

class BodyState:
    """The simulated body's ground truth in a state (physics runs only)."""

    @property
    def height_m(self) -> float:
        """Height of the body's origin above the ground, m."""
    @property
    def roll_deg(self) -> float:
        """Roll, degrees (right side down positive)."""
    @property
    def pitch_deg(self) -> float:
        """Pitch, degrees (nose up positive)."""
    @property
    def quaternion(self) -> npt.NDArray[np.float64]:
        """Attitude w, x, y, z in the pi3hat's frame, shape (4,)."""
    @property
    def position_m(self) -> npt.NDArray[np.float64]:
        """Body origin in the ground's frame (+x forward, +y left, +z up), m, shape (3,)."""
    @property
    def velocity_mps(self) -> npt.NDArray[np.float64]:
        """Body origin's velocity in the ground's frame, m/s, shape (3,)."""
    @property
    def fallen(self) -> bool:
        """The body has fallen (the run's ``fall`` event, ``[safety] fall_tilt_deg``) and is not upright again yet."""
    @property
    def yaw_deg(self) -> float:
        """Heading, degrees, positive turning left."""
    @property
    def qpos(self) -> npt.NDArray[np.float64]:
        """MuJoCo's generalised positions of the whole model, shape (nq,); empty past 64."""

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
    @property
    def reset_ack(self) -> int:
        """The last reset request the spine answered, 0 before any."""
    @property
    def reset_result(self) -> str:
        """ "none", "done", "no_physics", "not_lockstep" or "bad_domain"."""
    @property
    def awaiting(self) -> bool:
        """Whether the spine waits for a command answering this state (lockstep)."""
    @property
    def resets(self) -> int:
        """Resets of the simulated world done so far."""
    @property
    def body(self) -> Optional[BodyState]:
        """The simulated body's ground truth, or None without physics."""

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
    def wait_next(self, timeout: Optional[float] = None, *, awaited: bool = False) -> Optional[AgentState]:
        """The next state with a newer cycle (with ``awaited``: one the spine waits on); None after ``timeout`` s."""
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
        hold: int = 1,
    ) -> int:
        """Write one command for every servo; returns its heartbeat number."""
    def heartbeat(self) -> int:
        """Send the last command again (proof of life); returns its heartbeat number."""
    def arm(self) -> bool:
        """Echo the spine's arm token if it waits to be armed; True if it did."""
    def request_reset(
        self,
        seed: int = 0,
        *,
        friction_scale: Optional[float] = None,
        mass_scale: Optional[float] = None,
        payload_kg: Optional[float] = None,
        kp_scale: Optional[_Values] = None,
        kd_scale: Optional[_Values] = None,
        joint_offset: Optional[_Values] = None,
        joint_velocity: Optional[_Values] = None,
        latency_cycles: Optional[int] = None,
        pushes: Optional[Sequence[Tuple[float, float, float, float, float]]] = None,
    ) -> int:
        """Ask for a reset of the simulated world with the next command; returns the request number."""
    def close(self) -> None:
        """Detach from the spine."""


# --- tlog (python/src/tlog.rs) ---

import os as _os
from typing import Any as _Any, Dict as _Dict, Iterator as _Iterator, List as _List, Optional as _Optional, Tuple as _Tuple

import numpy as _np

class TlogError(ValueError):
    """Not a TLOG0003 log, or a record that cannot be read as asked."""

class TlogWarning(UserWarning):
    """Part of a log could not be read; the message counts what was lost and where."""

class NativeLog:
    """The native half of ``rtloop.tlog.Log`` (times in µs since the UNIX epoch)."""

    def __init__(self, path: _os.PathLike | str) -> None: ...
    @property
    def path(self) -> _os.PathLike | str: ...
    @property
    def size(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def close(self) -> None: ...
    def record_names(self) -> _List[str]: ...
    def records(self) -> _List[_Tuple[str, int, _Optional[int], _Optional[int]]]: ...
    def span_us(self) -> _Optional[_Tuple[int, int]]: ...
    def origin_us(self) -> _Optional[int]: ...
    def damage(self) -> _Dict[str, _Any]: ...
    def report(self) -> _Dict[str, _Any]: ...
    def schema_json(self, name: str) -> str: ...
    def seek(self, timestamp_us: int) -> int: ...
    def read(
        self,
        name: str,
        from_us: _Optional[int] = None,
        to_us: _Optional[int] = None,
        fields: _Optional[_List[str]] = None,
        enum_names: bool = False,
    ) -> _Tuple[_List[str], _List[_np.ndarray], _np.ndarray, _np.ndarray, _List[str]]: ...
    def items(
        self,
        name: _Optional[str] = None,
        from_us: _Optional[int] = None,
        to_us: _Optional[int] = None,
        raw: bool = False,
        flat: bool = False,
    ) -> ItemIter: ...

class ItemIter(_Iterator[_Tuple[str, _Optional[float], _Any]]):
    """Iterator of ``(record, timestamp seconds or None, value)``."""

    def __iter__(self) -> ItemIter: ...
    def __next__(self) -> _Tuple[str, _Optional[float], _Any]: ...


# --- sim (python/src/sim.rs) ---

class SimServer:
    """Simulated servos served behind fdcanusb ptys or UDP ports on a background Rust thread
    (``rtloop.sim.serve`` wraps it)."""

    def __init__(
        self,
        buses: Sequence[Tuple[int, str, str, int, Sequence[int]]],
        *,
        instant: bool = False,
        allow_remote: bool = False,
        config_dir: Optional[str] = None,
    ) -> None:
        """Start serving ``(bus, "fdcanusb"|"udp", path or host, port, servo ids)`` per bus."""
    @property
    def endpoints(self) -> List[Tuple[int, str, str]]:
        """Per bus ``(bus, kind, path or bound host:port)``."""
    @property
    def udp_addresses(self) -> List[Tuple[int, str, int]]:
        """Per UDP bus ``(bus, host, port)`` as bound."""
    @property
    def warnings(self) -> List[str]:
        """Warnings from loading stored configurations."""
    @property
    def notes(self) -> List[str]:
        """Notes from loading stored configurations."""
    @property
    def running(self) -> bool:
        """Whether it is still serving."""
    def stop(self) -> Dict[str, Any]:
        """Stop, remove the links, return the report dict."""

# Received frame: (bus, arbitration_id, data, flags: bit 0 extended, 1 FD, 2 BRS).
_Rx = Tuple[int, int, bytes, int]

class FrameCycler:
    """Several CAN-FD buses driven as one (``rtloop.moteus_transport.Transport`` wraps it)."""

    def __init__(
        self,
        buses: Sequence[Tuple[int, str]],
        *,
        sim_servos: Sequence[Tuple[int, Sequence[int]]] = ...,
        timeout: float = 0.1,
        fdcanusb_crc: bool = False,
        sim_instant: bool = False,
    ) -> None:
        """Open ``(bus number, address)`` per bus; ``timeout`` in seconds."""
    @property
    def buses(self) -> List[Tuple[int, str]]:
        """``(bus number, address)`` per bus."""
    def cycle(
        self,
        frames: Sequence[Tuple[int, int, bytes, bool, bool]],
        *,
        listen: Sequence[int] = ...,
        timeout: Optional[float] = None,
    ) -> Tuple[List[Tuple[int, int, int, bytes, int]], List[_Rx]]:
        """Send ``(bus, arbitration_id, data, reply, raw)`` frames; return ``(replies, others)``,
        each reply ``(frame index, bus, arbitration_id, data, flags)``."""
    def receive(self, timeout: float = 0.0) -> List[_Rx]:
        """Every frame received within ``timeout`` seconds, sending nothing."""
    @property
    def last_stats(self) -> Dict[str, Any]:
        """Figures of the last call."""
    def counters(self) -> Dict[int, Dict[str, Any]]:
        """Per bus number, the transport's running counters."""
    def close(self) -> None:
        """Close every bus."""
    @property
    def closed(self) -> bool:
        """Whether ``close`` was called."""

# --- frame (python/src/frame.rs) ---

def frame_encode(
    kind: str,
    *,
    id: int = 1,
    position: Optional[float] = None,
    velocity: Optional[float] = None,
    feedforward_torque: Optional[float] = None,
    kp_scale: Optional[float] = None,
    kd_scale: Optional[float] = None,
    maximum_torque: Optional[float] = None,
    watchdog_timeout: Optional[float] = None,
    velocity_limit: Optional[float] = None,
    accel_limit: Optional[float] = None,
    query: bool = False,
    resolution: Optional[str] = None,
) -> Tuple[int, bytes]:
    """``rtloop frame encode``: ``(arbitration_id, data)``, data unpadded."""

def frame_decode(data: Union[bytes, bytearray, memoryview, str]) -> Dict[str, Any]:
    """``rtloop frame decode``: the command's JSON as a dict."""

# Present when the package is built with its renderer (feature `render`; docs/gym.md).
class RenderUnavailable(RuntimeError):
    """MuJoCo's offscreen renderer cannot draw here (no OpenGL context through EGL)."""

class Renderer:
    """The simulated robot drawn by MuJoCo's offscreen renderer, headless (EGL)."""

    def __init__(
        self,
        model: Optional[Union[str, os.PathLike]] = None,
        *,
        config: Optional[Union[str, os.PathLike]] = None,
        width: int = 480,
        height: int = 480,
        azimuth: float = 90.0,
        elevation: float = -20.0,
        distance: Optional[float] = None,
        track: bool = True,
    ) -> None:
        """``model`` a model file, ``config`` a run file naming one; neither: the built-in quadruped."""
    @property
    def nq(self) -> int:
        """The model's generalised positions: the length ``render`` takes."""
    @property
    def model(self) -> str:
        """"the built-in quadruped", or the file as given."""
    @property
    def size(self) -> Tuple[int, int]:
        """(width, height) in pixels."""
    def render(self, qpos: npt.NDArray[np.float64]) -> npt.NDArray[np.uint8]:
        """The model posed at ``qpos`` (a state's ``body.qpos``): RGB, shape (height, width, 3)."""
