"""Type stubs of the native extension ``rtloop._rtloop`` (users import from ``rtloop``)."""

__version__: str

# --- robot (python/src/robot.rs) ---



# --- agent (python/src/agent.rs) ---



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



# --- frame (python/src/frame.rs) ---
