"""Robots from Python: :class:`Robot` commands and queries every servo in one call.

A :class:`Robot` is the simulated 12-servo quadruped by default, or buses given as URIs
(``sim``, ``fdcanusb:PATH``, ``socketcan:IFACE``, ``udp:HOST:PORT``), or the ``[[bus]]``
tables of an ``rtloop run --config`` file. :meth:`Robot.cycle` sends every servo its command
(a scalar for all, or one value per servo) and returns a :class:`State` whose attributes are
numpy arrays with one value per servo, in the order of :attr:`Robot.ids`::

    import rtloop
    robot = rtloop.Robot(wire_time=False, clock="virtual")
    for _ in range(500):
        state = robot.cycle(position=0.1, velocity=0.0, maximum_torque=2.0)
    print(state.position, state.fresh.all())

Units: positions in revolutions, velocities rev/s, torques N·m, times in seconds.

For code written against the official ``moteus`` package, :meth:`Robot.controller` gives a
:class:`Controller` per servo with ``make_position()``, ``make_stop()``, ``make_query()`` …
(command objects for ``robot.cycle(commands=[...])``) and ``set_position()``, ``set_stop()``,
``query()`` … that run one cycle and return that servo's :class:`ServoResult`. Unlike
``moteus.Controller`` they are plain (not ``async``) calls, and every call queries.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Dict, Optional

from ._rtloop import Command, State
from ._rtloop import Robot as _NativeRobot

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._rtloop import PositionFields

__all__ = ["Robot", "State", "Command", "Controller", "ServoResult"]


class Robot(_NativeRobot):
    """Every servo of a robot, commanded and queried in one call per cycle.

    ``Robot()`` is the simulated 12-servo quadruped (ids 1-12, three per bus on buses 1-4).
    ``Robot(buses={1: "fdcanusb:/dev/ttyACM0"}, servos={1: [1, 2, 3]})`` names real buses
    (``sim``, ``fdcanusb:PATH``, ``socketcan:IFACE``, ``udp:HOST:PORT``; without ``buses``
    every bus is simulated); ``Robot("robot.toml")`` reads the ``[[bus]]`` tables of an
    ``rtloop run --config`` file (its loop settings are not read; ``[sim]`` and ``[faults]``
    are refused: pass the keywords below instead). A device that does not exist raises
    ``FileNotFoundError`` naming it.

    Keywords:

    * ``wire_time`` -- simulated buses: frames take their CAN-FD time (True) or none.
    * ``clock`` -- ``"realtime"``, or ``"virtual"`` (simulated robots only): deterministic
      simulated time that advances by ``period`` per cycle, as fast as the host computes.
    * ``period`` -- seconds between cycle starts, ``cycle()`` waits for the next (0.001 by
      default on the virtual clock; None on the real one: every call cycles at once).
    * ``resolution`` -- ``"int16"`` (compact frames as ``rtloop run``; positions to ±3.2767
      rev, velocities to ±8.19 rev/s) or ``"float"`` (moteus' default, full range).
    * ``timeout`` -- the longest a cycle waits for replies, s (default: 1 ms past the wire
      estimate, at most 5 ms or 0.9 period).
    * ``limits`` -- ``{field: (low, high)}`` replacing the accepted ranges (:attr:`limits`;
      the watchdog's 0.01-10 s may only be narrowed).
    * ``start_position`` (rev), ``drop_rate`` (probability a frame is lost), ``seed`` --
      simulated buses only.
    * ``physics`` -- True: a body under the simulated servos (MuJoCo; the built-in quadruped,
      or the robot file's ``[physics]`` model), so the joints carry its weight and touch the
      ground and the IMU reads its attitude; :attr:`body` says where it is, :meth:`push`
      pushes it. Needs a package built with physics (``MATURIN_PEP517_ARGS="--features
      physics"``, docs/physics.md). ``ground_tilt=(roll, pitch)`` (degrees) slopes the ground.
      With ``clock="virtual"`` a run is the same on every repeat.

    Use a robot from one thread at a time: a cycle started while another thread's cycle
    runs raises ``RuntimeError``. ``with Robot(...) as robot:`` closes the buses at the end.
    """

    __slots__ = ()

    def controller(self, id: int, bus: Optional[int] = None) -> "Controller":
        """A :class:`Controller` for servo ``id`` (on bus ``bus``; ``None`` when the id is
        on one bus only), moteus-style.

        Raises ``ValueError`` when the robot has no such servo, or the id is on several
        buses and ``bus`` is not given.
        """
        return Controller(self, id, bus)


class ServoResult:
    """One servo's reply, named like the registers of ``moteus.Result.values``.

    Attributes: ``id``, ``bus``, ``mode`` (int, -1 if the servo never answered),
    ``position`` (rev), ``velocity`` (rev/s), ``torque`` (N·m), ``q_current``,
    ``d_current`` (A), ``motor_temperature``, ``temperature`` (°C), ``voltage`` (V),
    ``fault`` (int, -1 if never answered), ``fresh`` (the values answer this cycle's
    request), ``age_cycles`` (cycles since they did; -1 never) and ``cycle``.
    """

    __slots__ = (
        "id",
        "bus",
        "mode",
        "position",
        "velocity",
        "torque",
        "q_current",
        "d_current",
        "motor_temperature",
        "temperature",
        "voltage",
        "fault",
        "fresh",
        "age_cycles",
        "cycle",
    )

    #: The register-like fields, in the order :attr:`values` lists them.
    REGISTERS = (
        "mode",
        "position",
        "velocity",
        "torque",
        "q_current",
        "d_current",
        "motor_temperature",
        "voltage",
        "temperature",
        "fault",
    )

    def __init__(self, state: State, slot: int) -> None:
        """The reply of the servo at ``slot`` (its index in :attr:`Robot.ids`) in ``state``."""
        row = state.as_array()[slot]
        self.id: int = int(row["id"])
        self.bus: int = int(row["bus"])
        self.mode: int = int(row["mode"])
        self.position: float = float(row["position"])
        self.velocity: float = float(row["velocity"])
        self.torque: float = float(row["torque"])
        self.q_current: float = float(row["q_current"])
        self.d_current: float = float(row["d_current"])
        self.motor_temperature: float = float(row["motor_temperature"])
        self.temperature: float = float(row["temperature"])
        self.voltage: float = float(row["voltage"])
        self.fault: int = int(row["fault"])
        self.fresh: bool = bool(row["fresh"])
        self.age_cycles: int = int(row["age_cycles"])
        self.cycle: int = state.cycle

    @property
    def values(self) -> Dict[str, Any]:
        """The register values by name (``{"mode": 10, "position": 0.1, ...}``), leaving out
        those the servo did not report (NaN, or -1 for mode and fault)."""
        out: Dict[str, Any] = {}
        for name in self.REGISTERS:
            v = getattr(self, name)
            if isinstance(v, float) and math.isnan(v):
                continue
            if name in ("mode", "fault") and v < 0:
                continue
            out[name] = v
        return out

    def __repr__(self) -> str:
        """``id/{values}`` like ``moteus.Result``, plus whether it is fresh."""
        fresh = "" if self.fresh else f" (stale: {self.age_cycles} cycles)"
        return f"{self.id}/{self.values}{fresh}"


class Controller:
    """One servo of a :class:`Robot`, with the calls of ``moteus.Controller``.

    ``make_*`` return a :class:`Command` for ``robot.cycle(commands=[...])``; ``set_*`` and
    :meth:`query` run one cycle of the whole robot in which this servo gets the command and
    every other servo is only queried (no command: its mode stays, and a position command
    it had ends when its watchdog expires), and return this servo's :class:`ServoResult`.
    Position fields: positions in rev (NaN: hold where it is), velocities rev/s, torques
    N·m, ``watchdog_timeout`` s (0.1 when not given), ``velocity_limit`` rev/s,
    ``accel_limit`` rev/s²; the robot checks their ranges (:attr:`Robot.limits`).
    """

    __slots__ = ("_robot", "_id", "_bus", "_slot")

    def __init__(self, robot: Robot, id: int, bus: Optional[int] = None) -> None:
        """The servo ``id`` (on ``bus``, when the id is on several buses) of ``robot``."""
        ids = [int(i) for i in robot.ids]
        buses = [int(b) for b in robot.buses]
        matches = [s for s, (i, b) in enumerate(zip(ids, buses)) if i == id and (bus is None or b == bus)]
        if not matches:
            where = f" on bus {bus}" if bus is not None else ""
            raise ValueError(f"the robot has no servo {id}{where}; its servos are ids {sorted(set(ids))}")
        if len(matches) > 1:
            raise ValueError(f"servo id {id} is on buses {[buses[s] for s in matches]}; give bus= to say which")
        self._robot = robot
        self._slot = matches[0]
        self._id = id
        self._bus = buses[self._slot]

    @property
    def id(self) -> int:
        """The servo's moteus id."""
        return self._id

    @property
    def bus(self) -> int:
        """The servo's bus number."""
        return self._bus

    @property
    def slot(self) -> int:
        """The servo's index in :attr:`Robot.ids` and in every :class:`State` array."""
        return self._slot

    def __repr__(self) -> str:
        """``Controller(id=…, bus=…)``."""
        return f"Controller(id={self._id}, bus={self._bus})"

    # --- commands ---------------------------------------------------------------------

    def make_position(self, **fields: Unpack[PositionFields]) -> Command:
        """A position-mode command (mode 10) for this servo, from the keywords of
        :class:`Command`: ``position``, ``velocity``, ``feedforward_torque``, ``kp_scale``,
        ``kd_scale``, ``maximum_torque``, ``stop_position``, ``watchdog_timeout``,
        ``velocity_limit``, ``accel_limit``; ``None`` fields are not sent (the watchdog always
        is: 0.1 s unless given)."""
        return Command(self._id, bus=self._bus, mode="position", **fields)

    def make_stop(self) -> Command:
        """A stop command (mode 0; also clears a fault)."""
        return Command(self._id, bus=self._bus, mode="stop")

    def make_brake(self) -> Command:
        """A brake command (mode 15: windings shorted)."""
        return Command(self._id, bus=self._bus, mode="brake")

    def make_zero_velocity(self) -> Command:
        """A zero-velocity command (mode 12: hold still, damped)."""
        return Command(self._id, bus=self._bus, mode="zero_velocity")

    def make_query(self) -> Command:
        """A query alone (no command: the servo's mode stays as it is)."""
        return Command(self._id, bus=self._bus, mode="query")

    # --- one cycle each -----------------------------------------------------------------

    def execute(self, command: Command) -> ServoResult:
        """Run one robot cycle with ``command`` for its servo (the others queried); return
        this servo's result."""
        state = self._robot.cycle(commands=[command])
        return ServoResult(state, self._slot)

    def set_position(self, **fields: Unpack[PositionFields]) -> ServoResult:
        """One cycle commanding :meth:`make_position` (same keywords) to this servo; returns
        its result."""
        return self.execute(self.make_position(**fields))

    def set_stop(self) -> ServoResult:
        """One cycle stopping this servo (mode 0); returns its result."""
        return self.execute(self.make_stop())

    def set_brake(self) -> ServoResult:
        """One cycle braking this servo (mode 15); returns its result."""
        return self.execute(self.make_brake())

    def set_zero_velocity(self) -> ServoResult:
        """One cycle putting this servo in zero velocity (mode 12); returns its result."""
        return self.execute(self.make_zero_velocity())

    def query(self) -> ServoResult:
        """One cycle querying every servo; returns this one's result."""
        return self.execute(self.make_query())
