"""Type stubs of the native extension ``rtloop._rtloop`` (users import from ``rtloop``)."""

__version__: str

# --- robot (python/src/robot.rs) ---
# Units: positions rev, velocities rev/s, torques N·m, currents A, temperatures °C,
# voltages V, times s. A "field" argument is a scalar (every servo) or one value per servo
# in `Robot.ids` order (anything numpy converts to float64); None is not sent.

from typing import Any, Dict, Iterable, Mapping, Optional, Tuple, Union
import os

import numpy as np
import numpy.typing as npt

_Field = Union[float, int, npt.ArrayLike, None]

class Command:
    """One servo's command for `Robot.cycle(commands=[...])` (see `Controller.make_*`)."""

    def __init__(
        self,
        id: int,
        *,
        bus: Optional[int] = None,
        mode: str = "position",
        position: Optional[float] = None,
        velocity: Optional[float] = None,
        feedforward_torque: Optional[float] = None,
        kp_scale: Optional[float] = None,
        kd_scale: Optional[float] = None,
        maximum_torque: Optional[float] = None,
        stop_position: Optional[float] = None,
        watchdog_timeout: Optional[float] = None,
        velocity_limit: Optional[float] = None,
        accel_limit: Optional[float] = None,
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
    ) -> None: ...
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



# --- tlog (python/src/tlog.rs) ---



# --- sim (python/src/sim.rs) ---



# --- frame (python/src/frame.rs) ---
