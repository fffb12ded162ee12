"""The simulated moteus servos behind a pseudo-terminal or UDP, from Python (``rtloop sim``
in-process).

The simulator runs on a background Rust thread that never holds the GIL, so code in the same
process — the official ``moteus`` package, :mod:`rtloop.moteus_transport`, anything that opens
a serial port or a UDP socket — drives it as it would a real fdcanusb::

    import asyncio, moteus, rtloop

    with rtloop.sim.fdcanusb(servos=[1, 2]) as path:
        async def main():
            c = moteus.Controller(1, transport=moteus.Fdcanusb(path))
            print(await c.set_position(position=0.1, query=True))
        asyncio.run(main())

* :func:`fdcanusb` -- one bus behind a pty speaking the fdcanusb protocol, linked at a path.
* :func:`udp` -- one bus behind a UDP port (loopback unless ``allow_remote=True``).
* :func:`serve` -- several buses, a :class:`Simulator` with their paths or addresses and a
  closing report.

Every simulated servo answers register requests and serves its diagnostic console (``tel``,
``conf``, ``d``) as ``rtloop sim`` does. Link paths follow the command's rules: a path that
exists is refused (``FileExistsError``) unless it is the stale link of a killed simulator,
and a link is removed when its simulator stops, exceptions included.
"""

from __future__ import annotations

import contextlib
import operator
import os
import tempfile
import warnings
import weakref
from collections.abc import Mapping as _MappingABC
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import _rtloop

__all__ = ["Simulator", "serve", "fdcanusb", "udp", "TRANSPORTS"]

#: The ways a simulated bus can be served.
TRANSPORTS = ("fdcanusb", "udp")

PathLike = Union[str, "os.PathLike[str]"]


def _int(value: Any, what: str, example: str) -> int:
    """``value`` as an int (numpy integers too), or a ``TypeError`` naming ``what``."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an integer, not a bool: give e.g. {example}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"{what} must be an integer, not {type(value).__name__}: give e.g. {example}"
        ) from None


def _servo_list(bus: int, servos: Any) -> List[int]:
    """The servo ids of one bus as a list of ints (range and duplicates are checked natively)."""
    if isinstance(servos, (str, bytes)) or not hasattr(servos, "__iter__"):
        raise TypeError(
            f"bus {bus}: servos must be a list of ids, not {type(servos).__name__}: give e.g. [1, 2, 3]"
        )
    return [_int(s, f"bus {bus}: a servo id", "[1, 2, 3]") for s in servos]


def _remove_dir(path: Optional[str]) -> None:
    """Remove the private directory the links were made in, if it is empty by now."""
    if path is None:
        return
    with contextlib.suppress(OSError):
        os.rmdir(path)


def _shutdown(native: Any, tmpdir: Optional[str]) -> None:
    """Stop a simulator nobody stopped (garbage collection, interpreter exit)."""
    with contextlib.suppress(Exception):
        native.stop()
    _remove_dir(tmpdir)


class Simulator:
    """Simulated buses being served; made by :func:`serve`.

    A context manager: leaving the ``with`` block stops it (see :meth:`stop`). Dropping the
    last reference also stops it, but :meth:`stop` is the way to get the report.
    """

    def __init__(
        self,
        native: Any,
        servos: Dict[int, List[int]],
        tmpdir: Optional[str],
    ) -> None:
        """Wrap a started native server (use :func:`serve`, not this)."""
        self._native = native
        self._servos = servos
        self._tmpdir = tmpdir
        self._report: Optional[Dict[str, Any]] = None
        self._paths: Dict[int, str] = {}
        self._addresses: Dict[int, Tuple[str, int]] = {}
        for bus, kind, where in native.endpoints:
            if kind == "fdcanusb":
                self._paths[bus] = where
        for bus, host, port in native.udp_addresses:
            self._addresses[bus] = (host, port)
        self._finalizer = weakref.finalize(self, _shutdown, native, tmpdir)

    @property
    def paths(self) -> Dict[int, str]:
        """Per fdcanusb bus number, the path its pty is linked at (open it with
        ``moteus.Fdcanusb(path)`` or ``fdcanusb:PATH``)."""
        return dict(self._paths)

    @property
    def addresses(self) -> Dict[int, Tuple[str, int]]:
        """Per UDP bus number, the ``(host, port)`` it is bound at."""
        return dict(self._addresses)

    @property
    def uris(self) -> Dict[int, str]:
        """Per bus number, its address as rtloop writes it: ``fdcanusb:PATH`` or
        ``udp:HOST:PORT`` (for ``rtloop.moteus_transport.Transport(buses=...)``, ``rtloop
        servo --transport``, ``rtloop run --bus``)."""
        out: Dict[int, str] = {}
        for bus, path in self._paths.items():
            out[bus] = f"fdcanusb:{path}"
        for bus, (host, port) in self._addresses.items():
            shown = f"[{host}]" if ":" in host else host
            out[bus] = f"udp:{shown}:{port}"
        return dict(sorted(out.items()))

    @property
    def servos(self) -> Dict[int, List[int]]:
        """Per bus number, the simulated servo ids on it."""
        return {bus: list(ids) for bus, ids in self._servos.items()}

    @property
    def warnings(self) -> List[str]:
        """Warnings from loading stored configurations (also issued as ``RuntimeWarning``)."""
        return list(self._native.warnings)

    @property
    def notes(self) -> List[str]:
        """Notes from loading stored configurations (a servo a stored ``id.id`` moved)."""
        return list(self._native.notes)

    @property
    def running(self) -> bool:
        """Whether it is still serving."""
        return bool(self._native.running)

    def stop(self) -> Dict[str, Any]:
        """Stop serving, remove the pty links (and the private directory they were made in),
        and return the report.

        The report is a dict: ``endpoints`` holds one dict per bus (``bus``, ``transport``,
        ``address``, ``name``, ``frames_in``, ``frames_out``, ``protocol_errors``,
        ``dropped``, ``service_errors``, ``deliver_errors``, ``undelivered``,
        ``first_error``, ``configs_stored``, ``configs_failed``, ``first_store_error``,
        ``kept_in_memory`` and ``servos``: per servo ``id``, ``malformed_frames``,
        ``not_understood``, ``console_lines``, ``console_errors``,
        ``console_input_dropped``, ``telemetry_sent``, ``telemetry_skipped``);
        ``poll_errors``; ``text``, the line ``rtloop sim`` prints when it stops. Calling it
        again returns the same report. Waits up to ~50 ms, with the GIL released.
        """
        if self._report is None:
            self._report = self._native.stop()
            _remove_dir(self._tmpdir)
            self._finalizer.detach()
        return self._report

    def __enter__(self) -> "Simulator":
        """Use it in a ``with`` block; it is already serving."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop it, whether or not the block raised."""
        self.stop()

    def __repr__(self) -> str:
        """``Simulator(fdcanusb:/tmp/…/bus1 [1, 2, 3], …, running)``."""
        uris = self.uris
        parts = [f"{uris.get(b, b)} {ids}" for b, ids in sorted(self._servos.items())]
        state = "running" if self.running else "stopped"
        return f"Simulator({', '.join(parts)}, {state})"


def serve(
    buses: Mapping[int, Sequence[int]],
    transport: Union[str, Mapping[int, str]] = "fdcanusb",
    *,
    paths: Optional[Mapping[int, PathLike]] = None,
    host: str = "127.0.0.1",
    ports: Optional[Mapping[int, int]] = None,
    allow_remote: bool = False,
    instant: bool = False,
    config_dir: Optional[PathLike] = None,
) -> Simulator:
    """Serve simulated servos on one or more buses, as ``rtloop sim --bus N=URI --ids N=LIST``.

    Args:
        buses: per bus number (1-255), the simulated servo ids on it (1-127, each once per
            bus; the same id may live on different buses), e.g. ``{1: [1, 2, 3], 2: [4, 5, 6]}``.
        transport: ``"fdcanusb"`` (a pty per bus) or ``"udp"`` (a UDP port per bus), for
            every bus or per bus number.
        paths: per fdcanusb bus, where to link its pty. Default: ``bus<N>`` in a fresh
            private temporary directory, removed when the simulator stops.
        host: the address UDP buses bind to; loopback unless ``allow_remote``.
        ports: per UDP bus, its port. Default 0: any free port (see
            :attr:`Simulator.addresses`).
        allow_remote: allow binding UDP to an address other hosts can reach (a simulator
            answers anyone who writes to it).
        instant: simulated wires take no time and servos answer at once (``rtloop sim
            --no-wire-time``): measures the clients, not CAN-FD physics.
        config_dir: keep each servo's configuration in ``DIR/bus<B>-servo<ID>.cfg``, loaded
            now and written on every ``conf write`` (``rtloop sim --config-dir``); the
            directory must exist. Default: configurations live in memory only.

    Returns a running :class:`Simulator`. Raises ``ValueError`` for bad ids, bus numbers,
    ports or transports and for a non-loopback host without ``allow_remote``;
    ``FileExistsError`` when something other than a stale simulator link is at a path;
    ``FileNotFoundError`` for a missing directory; ``OSError`` when a port cannot be bound.
    """
    if not isinstance(buses, _MappingABC) or not buses:
        raise ValueError(
            "buses must be a non-empty dict of bus number to servo ids: give e.g. {1: [1, 2, 3]}"
        )
    numbers = [_int(b, "a bus number", "{1: [1, 2, 3]}") for b in buses]
    servos = {n: _servo_list(n, ids) for n, ids in zip(numbers, buses.values())}
    kinds: Dict[int, str] = {}
    for n in numbers:
        kind = transport.get(n, "fdcanusb") if isinstance(transport, _MappingABC) else transport
        if kind not in TRANSPORTS:
            raise ValueError(f'bus {n}: transport {kind!r} is not served: give "fdcanusb" or "udp"')
        kinds[n] = kind
    paths = dict(paths or {})
    ports = dict(ports or {})
    tmpdir: Optional[str] = None
    specs = []
    for n in numbers:
        if kinds[n] == "fdcanusb":
            if n in paths:
                where = os.fspath(paths[n])
            else:
                if tmpdir is None:
                    # Private (mode 0700) and fresh: no other user can place a file or link there.
                    tmpdir = tempfile.mkdtemp(prefix="rtloop-sim-")
                where = os.path.join(tmpdir, f"bus{n}")
            specs.append((n, "fdcanusb", where, 0, servos[n]))
        else:
            port = _int(ports.get(n, 0), f"bus {n}: the port", "0 (any free port) or 9000")
            specs.append((n, "udp", host, port, servos[n]))
    config = None if config_dir is None else os.fspath(config_dir)
    try:
        native = _rtloop.SimServer(specs, instant=instant, allow_remote=allow_remote, config_dir=config)
    except BaseException:
        _remove_dir(tmpdir)
        raise
    for warning in native.warnings:
        warnings.warn(warning, RuntimeWarning, stacklevel=2)
    return Simulator(native, servos, tmpdir)


@contextlib.contextmanager
def fdcanusb(
    servos: Sequence[int] = (1,),
    path: Optional[PathLike] = None,
    instant: bool = False,
    *,
    config_dir: Optional[PathLike] = None,
) -> Iterator[str]:
    """One simulated bus behind a pty that speaks the fdcanusb protocol, for a ``with`` block.

    Yields the path the pty is linked at (``path``, or a fresh path in a private temporary
    directory), ready when the block starts: open it with ``moteus.Fdcanusb(path)``,
    ``rtloop servo --transport fdcanusb:PATH`` or
    ``rtloop.moteus_transport.Transport(buses={1: "fdcanusb:" + path})``. The simulator stops
    and the link is removed when the block ends, also when it raises. ``instant`` and
    ``config_dir`` as for :func:`serve`; errors as for :func:`serve`.
    """
    paths = None if path is None else {1: path}
    with serve({1: servos}, "fdcanusb", paths=paths, instant=instant, config_dir=config_dir) as sim:
        yield sim.paths[1]


@contextlib.contextmanager
def udp(
    servos: Sequence[int] = (1,),
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    allow_remote: bool = False,
    instant: bool = False,
    config_dir: Optional[PathLike] = None,
) -> Iterator[Tuple[str, int]]:
    """One simulated bus behind a UDP port, for a ``with`` block.

    Yields ``(host, port)`` as bound (port 0 picks a free one); clients use
    ``udp:HOST:PORT``. ``host`` must be a loopback address unless ``allow_remote``. The
    simulator stops when the block ends, also when it raises. ``instant`` and ``config_dir``
    as for :func:`serve`; errors as for :func:`serve`.
    """
    with serve(
        {1: servos},
        "udp",
        host=host,
        ports={1: port},
        allow_remote=allow_remote,
        instant=instant,
        config_dir=config_dir,
    ) as sim:
        yield sim.addresses[1]
