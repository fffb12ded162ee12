"""``rtloop frame encode`` and ``rtloop frame decode`` as functions.

:func:`encode` builds a moteus command frame exactly as the official ``moteus`` Python
package sends it (before padding), and :func:`decode` takes any payload apart into its
subframes and registers. Both run the very code of the ``rtloop frame`` command, so they
return what it prints and refuse what it refuses, with the same messages::

    >>> import rtloop
    >>> f = rtloop.frame.encode("position", id=1, position=0.5, velocity=0.0, query=True)
    >>> str(f)
    '8001 01000a0e200000003f0000000011001f01130d'
    >>> rtloop.frame.decode("2404000A00881300000000230D301900")["registers"]["0x001"]
    0.5

Units: positions in revolutions, velocities in rev/s, accelerations in rev/s², torques in
N·m, the watchdog timeout in seconds; kp/kd scales are plain factors.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Union

from . import _rtloop

__all__ = ["Frame", "encode", "decode", "KINDS", "RESOLUTIONS"]

#: The commands :func:`encode` builds (``rtloop frame encode``'s kinds).
KINDS = ("position", "query", "stop", "zero_velocity")

#: Register resolutions a ``position`` command's registers can be written with.
RESOLUTIONS = ("int8", "int16", "int32", "float")


@dataclasses.dataclass(frozen=True)
class Frame:
    """One moteus CAN-FD frame: its arbitration id and its payload (unpadded).

    ``str(frame)`` is the ``HEXID HEXDATA`` line ``rtloop frame encode`` prints, e.g.
    ``8001 11001f01130d``.
    """

    #: The CAN arbitration id: bit 15 asks for a reply, bits 8-14 are the source (the
    #: host, 0), bits 0-6 the destination servo, bits 16-28 the CAN prefix.
    arbitration_id: int
    #: The payload, before padding to a CAN-FD length.
    data: bytes

    def __str__(self) -> str:
        """The ``HEXID HEXDATA`` line of ``rtloop frame encode``."""
        return f"{self.arbitration_id:04x} {self.data.hex()}"

    @property
    def destination(self) -> int:
        """The servo id the frame is for (127: every servo)."""
        return self.arbitration_id & 0x7F

    @property
    def source(self) -> int:
        """The sender's id (0 for a host)."""
        return (self.arbitration_id >> 8) & 0x7F

    @property
    def reply_required(self) -> bool:
        """Whether the servo is asked to answer."""
        return bool(self.arbitration_id & 0x8000)


def encode(
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
) -> Frame:
    """Build a command frame as ``rtloop frame encode KIND`` does.

    Args:
        kind: ``"position"``, ``"query"``, ``"stop"`` or ``"zero_velocity"``.
        id: the servo id, 1 to 127.
        position: target position, rev (NaN: hold the current position).
        velocity: target velocity, rev/s.
        feedforward_torque: feedforward torque, N·m.
        kp_scale: factor on the configured proportional gain (at least 0).
        kd_scale: factor on the configured derivative gain (at least 0).
        maximum_torque: torque limit, N·m (at least 0).
        watchdog_timeout: s; 0 means the servo's default, NaN no watchdog.
        velocity_limit: rev/s (at least 0).
        accel_limit: rev/s² (at least 0).
        query: append the default query and ask for a reply (``query`` always does).
        resolution: ``"int8"``, ``"int16"``, ``"int32"`` or ``"float"`` for the command's
            registers (``position`` only; the query keeps its own). ``None``: float, as the
            moteus package's default ``PositionResolution``.

    Only ``position`` takes register values. Returns the :class:`Frame`; raises
    ``ValueError`` with the command's message for anything it refuses (an id outside 1-127,
    a register value out of range, registers on a kind that has none).
    """
    arbitration_id, data = _rtloop.frame_encode(
        kind,
        id=id,
        position=position,
        velocity=velocity,
        feedforward_torque=feedforward_torque,
        kp_scale=kp_scale,
        kd_scale=kd_scale,
        maximum_torque=maximum_torque,
        watchdog_timeout=watchdog_timeout,
        velocity_limit=velocity_limit,
        accel_limit=accel_limit,
        query=query,
        resolution=resolution,
    )
    return Frame(arbitration_id=arbitration_id, data=data)


def decode(data: Union[bytes, bytearray, memoryview, str]) -> Dict[str, Any]:
    """Take a payload apart as ``rtloop frame decode`` does.

    Args:
        data: the payload as bytes, or as hex text (``0x``, spaces, colons and dashes
            between bytes are allowed), at most 64 bytes.

    Returns the command's JSON as a dict: ``subframes`` (a list, one dict per subframe with
    ``kind``, ``type``, ``start``, ``count``, ``names``, ``values`` …), ``registers`` (keyed
    like ``"0x001"``, values in physical units — rev, rev/s, N·m, V, °C —, integer registers
    as ints, NaN as ``None``) and, when an integer register held a value it cannot,
    ``invalid``. Raises ``ValueError`` for a malformed payload and ``TypeError`` for data
    that is neither bytes nor text.
    """
    result: Dict[str, Any] = _rtloop.frame_decode(data)
    return result
