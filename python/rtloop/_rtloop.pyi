"""Type stubs of the native extension ``rtloop._rtloop`` (users import from ``rtloop``)."""

__version__: str

# --- robot (python/src/robot.rs) ---



# --- agent (python/src/agent.rs) ---



# --- tlog (python/src/tlog.rs) ---



# --- sim (python/src/sim.rs) ---

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

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

from typing import Any, Dict, Optional, Tuple, Union

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
