"""A transport for the official ``moteus`` package that moves its frames through rtloop.

Existing moteus code speeds up by changing the line that makes its transport::

    import moteus, rtloop.moteus_transport

    # before: transport = moteus.Fdcanusb("/dev/ttyACM0")
    transport = rtloop.moteus_transport.Transport(
        buses={1: "fdcanusb:/dev/ttyACM0", 2: "fdcanusb:/dev/ttyACM1"},
        servos={1: [1, 2, 3], 2: [4, 5, 6]},
    )
    controllers = [moteus.Controller(i, transport=transport) for i in range(1, 7)]
    results = await transport.cycle([c.make_position(position=0.1, query=True) for c in controllers])

:meth:`Transport.cycle` hands every frame of the call to rtloop's native multi-bus cycle
(``io::Cycler``): all buses are written at once, replies are matched to their requests in
Rust (same CAN prefix, from the request's destination, to its source), and the call returns
as soon as every awaited reply is in, or after ``timeout``. The wait runs with the GIL
released. Results are what moteus returns: each command's ``parse`` of its reply, in the
order of the commands.

A bus address is what rtloop takes everywhere: ``fdcanusb:PATH`` (a USB fdcanusb, a moteus
UART link, or ``rtloop.sim.fdcanusb``'s pty), ``socketcan:IFACE``, ``udp:HOST:PORT``
(``rtloop sim --udp``) or ``sim`` (an in-process simulated bus holding the servos that
``servos`` lists for it).

What does not route, and how it differs from moteus' own transports:

* ``cycle`` blocks the event loop while it waits (at most ``timeout``, the GIL released): it
  is one native call, not a set of asyncio tasks. ``read`` and ``flush_read_queue`` do not:
  they poll every millisecond and yield in between.
* Servos are routed by CAN id through ``servos``; there is no discovery by broadcast, so
  ``discover()`` raises ``NotImplementedError``, and ids that are on no listed bus are
  refused (with one bus, every id goes to it). UUID-prefix addressing (a
  ``DeviceAddress`` with no ``can_id``) is refused too.
* A reply is matched by ids in Rust: a command's ``reply_filter`` is applied afterwards, and
  a reply it rejects goes to :meth:`read` rather than being waited past.
* ``request_attitude`` is ignored (no pi3hat IMU); ``read_unsolicited`` and
  ``force_can_check`` take bus numbers (a list, and a bit mask with bit N for bus N).
* moteus_tool and tview build their own transports from the command line; they cannot be
  pointed at this one (use ``rtloop.sim.fdcanusb`` with their ``--fdcanusb PATH`` instead).
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Mapping as _MappingABC
from typing import Any, Deque, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _rtloop

try:
    import moteus as _moteus
except ImportError as _error:  # pragma: no cover - exercised only without moteus
    raise ImportError(
        "rtloop.moteus_transport needs the official moteus package: pip install moteus"
    ) from _error

__all__ = ["Transport"]

#: Frames kept for :meth:`Transport.read` at most (the oldest are dropped), as moteus does.
MAX_QUEUED = 100

#: How often :meth:`Transport.read` and :meth:`Transport.flush_read_queue` look for frames, s.
POLL_INTERVAL_S = 0.001

_BROADCAST = 0x7F

NativeRx = Tuple[int, int, bytes, int]


def _to_moteus_frame(bus: int, arbitration_id: int, data: bytes, flags: int) -> Any:
    """A received frame as the moteus package represents it (``bus`` set to the bus number)."""
    return _moteus.Frame(
        arbitration_id=arbitration_id,
        data=data,
        dlc=len(data),
        is_extended_id=bool(flags & 1),
        is_fd=bool(flags & 2),
        bitrate_switch=bool(flags & 4),
        channel=None,
        bus=bus,
    )


class Transport:
    """A moteus transport whose frames travel through rtloop's native multi-bus cycle.

    Args:
        buses: per bus number (1-255), its address (``fdcanusb:PATH``, ``socketcan:IFACE``,
            ``udp:HOST:PORT`` or ``sim``); a single address means bus 1.
        servos: per bus number, the servo ids on it (a plain list means bus 1). Routes each
            command to its bus, and populates ``sim`` buses. May be omitted with one bus.
        timeout: how long a cycle waits for missing replies at most, s (more than 0, at most
            60). A cycle whose replies are all in returns at once.
        fdcanusb_crc: append the ``*XX`` checksum to fdcanusb lines (moteus UART links).
        sim_instant: ``sim`` buses take no wire time and their servos answer at once
            (measures the host side; default: CAN-FD timing in real time).

    Raises ``ValueError`` for bad bus numbers, ids or addresses, ``FileNotFoundError`` for a
    missing fdcanusb device, ``OSError`` for other devices that cannot be opened. Use it as
    ``moteus.Controller(id, transport=t)``, and close it (or use ``with``) when done.
    """

    def __init__(
        self,
        buses: Union[str, Mapping[int, str]],
        servos: Union[None, Sequence[int], Mapping[int, Sequence[int]]] = None,
        *,
        timeout: float = 0.1,
        fdcanusb_crc: bool = False,
        sim_instant: bool = False,
    ) -> None:
        """Open every bus (see the class docstring)."""
        if isinstance(buses, str):
            buses = {1: buses}
        if not isinstance(buses, _MappingABC) or not buses:
            raise ValueError(
                'buses must be a non-empty dict of bus number to address: give e.g. {1: "fdcanusb:/dev/ttyACM0"}'
            )
        if servos is None:
            servos = {}
        elif not isinstance(servos, _MappingABC):
            servos = {1: servos}
        self._routes: Dict[int, int] = {}
        sim_servos: List[Tuple[int, List[int]]] = []
        for bus, ids in servos.items():
            if bus not in buses:
                raise ValueError(
                    f"servos names bus {bus}, which is not in buses: add it to buses or remove it"
                )
            ids = list(ids)
            sim_servos.append((bus, ids))
            for servo in ids:
                if servo in self._routes and self._routes[servo] != bus:
                    raise ValueError(
                        f"servo id {servo} is listed on buses {self._routes[servo]} and {bus}: "
                        "commands are routed by id, so each id may be on one bus only"
                    )
                self._routes[servo] = bus
        for address in buses.values():
            if not isinstance(address, str):
                raise TypeError(
                    f'a bus address must be a string, not {type(address).__name__}: give e.g. "fdcanusb:/dev/ttyACM0"'
                )
        self._native = _rtloop.FrameCycler(
            list(buses.items()),
            sim_servos=sim_servos,
            timeout=timeout,
            fdcanusb_crc=fdcanusb_crc,
            sim_instant=sim_instant,
        )
        self._bus_numbers: List[int] = [n for n, _ in self._native.buses]
        self._single_bus: Optional[int] = self._bus_numbers[0] if len(self._bus_numbers) == 1 else None
        self._queue: Deque[Any] = collections.deque(maxlen=MAX_QUEUED)

    # --- moteus' Transport interface -------------------------------------------------

    async def cycle(
        self,
        commands: Iterable[Any],
        request_attitude: bool = False,
        read_unsolicited: Optional[Sequence[int]] = None,
        force_can_check: Optional[int] = None,
    ) -> List[Any]:
        """Send every command and return the parsed replies, as ``moteus.Transport.cycle``.

        Args:
            commands: moteus ``Command`` objects (``Controller.make_position(...)`` and the
                like), on any mix of buses.
            request_attitude: ignored (there is no IMU on these buses).
            read_unsolicited: bus numbers whose other received frames are returned too (as
                ``moteus.Frame``, after the replies).
            force_can_check: bit mask of bus numbers (bit N: bus N) to read as well, as
                ``read_unsolicited``.

        Returns each answered command's ``parse(reply)`` (a ``moteus`` result with
        ``.values`` and ``.id``; ``.bus`` is the bus number), in the order of the commands; a
        command whose reply did not come within the timeout has no entry. Raises
        ``ValueError`` for a command that cannot be routed, ``OSError`` when a bus failed.
        """
        return self._cycle(list(commands), read_unsolicited, force_can_check)

    async def write(self, command: Any) -> None:
        """Send one command without waiting for its reply (a reply goes to :meth:`read`)."""
        frames, _ = self._frames([command])
        _, others = self._native.cycle([(b, i, d, False, raw) for b, i, d, _, raw in frames])
        # Nothing was awaited, but frames that had arrived before the write belong to read().
        self._take(others)

    async def read(self, channel: Optional[int] = None) -> Any:
        """Wait for the next received frame that no cycle claimed (late replies, unsolicited
        frames) and return it as a ``moteus.Frame``; ``channel``: only from that bus number.

        Polls every millisecond and yields to the event loop in between, so it can be
        cancelled or wrapped in ``asyncio.wait_for``.
        """
        while True:
            frame = self._pop(channel)
            if frame is not None:
                return frame
            self._take(self._native.receive(0.0))
            frame = self._pop(channel)
            if frame is not None:
                return frame
            await asyncio.sleep(POLL_INTERVAL_S)

    async def flush_read_queue(self, timeout: float = 0.1, channel: Optional[int] = None) -> None:
        """Throw away every frame received during the next ``timeout`` seconds (and those
        already waiting); ``channel``: only that bus number's."""
        end = time.monotonic() + max(0.0, float(timeout))
        while True:
            self._take(self._native.receive(0.0))
            self._queue = collections.deque(
                (f for f in self._queue if channel is not None and f.bus != channel), maxlen=MAX_QUEUED
            )
            if time.monotonic() >= end:
                return
            await asyncio.sleep(POLL_INTERVAL_S)

    async def discover(self, *args: Any, **kwargs: Any) -> List[Any]:
        """Not supported: this transport routes by the ids given in ``servos`` (use
        ``moteus.Transport`` for discovery)."""
        raise NotImplementedError(
            "rtloop's moteus transport does not discover servos: list them in servos={bus: [ids]}"
        )

    def devices(self) -> List[int]:
        """The bus numbers, in order (moteus returns its TransportDevices here)."""
        return list(self._bus_numbers)

    def count(self) -> int:
        """The number of buses."""
        return len(self._bus_numbers)

    def close(self) -> None:
        """Close every bus; later calls raise ``RuntimeError``."""
        self._native.close()

    def __enter__(self) -> "Transport":
        """Use it in a ``with`` block; it is closed at the end."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close it."""
        self.close()

    async def __aenter__(self) -> "Transport":
        """Use it in an ``async with`` block; it is closed at the end."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close it."""
        self.close()

    # --- rtloop's extras --------------------------------------------------------------

    @property
    def buses(self) -> Dict[int, str]:
        """Per bus number, its address."""
        return dict(self._native.buses)

    @property
    def last_cycle(self) -> Dict[str, Any]:
        """Figures of the last call: ``expected``, ``answered``, ``received``, ``sent``,
        ``send_errors``, ``stale_drained``, ``rx_overflow``, ``timed_out``, ``duration_s`` (s)."""
        stats: Dict[str, Any] = self._native.last_stats
        return stats

    def counters(self) -> Dict[int, Dict[str, Any]]:
        """Per bus number, the transport's running counters (``sent``, ``received``,
        ``protocol_errors``, ``device_errors``, ``last_device_error``, ``disconnects``,
        ``reconnects``)."""
        counters: Dict[int, Dict[str, Any]] = self._native.counters()
        return counters

    # --- internals --------------------------------------------------------------------

    def _bus_of(self, command: Any, destination: int) -> int:
        """The bus number a command goes to."""
        for attr in ("bus", "channel"):
            explicit = getattr(command, attr, None)
            if isinstance(explicit, int) and not isinstance(explicit, bool):
                if explicit in self._bus_numbers:
                    return explicit
                raise ValueError(
                    f"command.{attr} is {explicit}, which is not one of the buses {self._bus_numbers}"
                )
        bus = self._routes.get(destination)
        if bus is not None:
            return bus
        if self._single_bus is not None:
            return self._single_bus
        raise ValueError(f"servo id {destination} is on none of the buses: list it in servos={{bus: [ids]}}")

    def _frames(self, commands: Sequence[Any]) -> Tuple[List[Tuple[int, int, bytes, bool, bool]], List[int]]:
        """``(bus, arbitration_id, data, reply, raw)`` for each command (one per bus for a
        broadcast), and for each frame the index of its command."""
        out: List[Tuple[int, int, bytes, bool, bool]] = []
        owners: List[int] = []
        for index, command in enumerate(commands):
            data = bytes(command.data)
            if getattr(command, "raw", False):
                arbitration_id = int(command.arbitration_id)
                buses = [self._bus_of(command, arbitration_id & 0x7F)]
                reply, raw = bool(getattr(command, "reply_required", False)), True
            else:
                destination = command.destination
                if not isinstance(destination, int):
                    can_id = getattr(destination, "can_id", None)
                    if can_id is None:
                        raise ValueError(
                            "a command addressed by UUID prefix cannot be routed by rtloop's transport: "
                            "address the servo by its CAN id"
                        )
                    destination = int(can_id)
                reply = bool(command.reply_required)
                arbitration_id = (
                    destination
                    | (0x8000 if reply else 0)
                    | (int(command.source) << 8)
                    | (int(getattr(command, "can_prefix", 0)) << 16)
                )
                if destination == _BROADCAST and getattr(command, "bus", None) is None:
                    buses = list(self._bus_numbers)
                else:
                    buses = [self._bus_of(command, destination)]
                raw = False
            for bus in buses:
                out.append((bus, arbitration_id, data, reply, raw))
                owners.append(index)
        return out, owners

    def _cycle(
        self,
        commands: List[Any],
        read_unsolicited: Optional[Sequence[int]],
        force_can_check: Optional[int],
    ) -> List[Any]:
        frames, owners = self._frames(commands)
        listen: List[int] = list(read_unsolicited or [])
        if force_can_check:
            listen += [b for b in self._bus_numbers if force_can_check & (1 << b)]
        listen = [b for b in dict.fromkeys(listen) if b in self._bus_numbers]
        replies, others = self._native.cycle(frames, listen=listen)
        results: List[Any] = []
        # Replies come in arrival order; moteus returns them in the order of the commands.
        for index, bus, arbitration_id, data, flags in sorted(replies, key=lambda r: r[0]):
            command = commands[owners[index]]
            frame = _to_moteus_frame(bus, arbitration_id, data, flags)
            reply_filter = getattr(command, "reply_filter", None)
            if reply_filter is not None and not reply_filter(frame):
                self._queue.append(frame)
                continue
            parse = getattr(command, "parse", None)
            results.append(parse(frame) if parse is not None else frame)
        if others:
            results.extend(_to_moteus_frame(*f) for f in others if f[0] in listen)
            self._take([f for f in others if f[0] not in listen])
        return results

    def _take(self, frames: Sequence[NativeRx]) -> None:
        """Queue frames no cycle claimed, for :meth:`read`."""
        for f in frames:
            self._queue.append(_to_moteus_frame(*f))

    def _pop(self, channel: Optional[int]) -> Any:
        if channel is None:
            return self._queue.popleft() if self._queue else None
        for i, frame in enumerate(self._queue):
            if frame.bus == channel:
                del self._queue[i]
                return frame
        return None
