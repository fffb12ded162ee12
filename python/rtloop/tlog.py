"""TLOG0003 telemetry logs -- rtloop's (``rtloop run --log``) and mjlib's -- into numpy and pandas.

::

    import rtloop.tlog

    with rtloop.tlog.open("run.tlog") as log:
        print(log.records())                 # {'cycle': 10002, 'event': 1, ...}
        cols = log.read("cycle")             # dict of numpy arrays, one per flattened field
        cols["timestamp"], cols["servo.0.position"]
        df = log.to_pandas("cycle", fields=["servo.*.position", "imu"])
        for record, t, value in log.items("event"):
            print(t, value["kind"])

**Columns.** :meth:`Log.read` gives a ``"timestamp"`` column (float64 seconds since the UNIX
epoch; NaN for an item without one) and one column per flattened leaf of the record, named
as ``rtloop log export --csv`` names them: object fields by name, array items by index, map
entries by key, unions (optionals) transparent -- ``servo.0.position``, ``imu.quaternion.0``.
A field called ``timestamp`` becomes ``timestamp#2``; a repeated field name (legal in a foreign
log) gets ``#2``, ``#3``, .... Columns come in schema order; a variable-length array gives as
many columns as its longest occurrence, shorter items leave the rest missing.

**Types.** float64 and float32 fields stay float64/float32; integers of any width are int64
(uint64 only when a value does not fit int64); bools are bool; timestamps and durations inside
a record are float64 seconds; strings are object arrays of ``str``, bytes object arrays of
``bytes``; enums are their integer value (int64), or with ``enums="name"`` an object array of
the item names (the integer where the schema names none). A value that is missing in some
rows (an optional that is empty, an array item a shorter item lacks) is NaN: integer and
bool columns with a missing row therefore become float64, object columns hold ``None``.

**Times.** ``start``, ``end`` and :meth:`Log.seek` take seconds since the UNIX epoch (an int,
float or timezone-aware :class:`datetime.datetime`) -- or, with ``relative=True``, seconds from
:attr:`Log.origin`, the timestamp of the first timestamped item in the file (what ``rtloop log
dump --from`` counts from). Both bounds are inclusive. Logs of ``rtloop run --lockstep`` carry
simulated time, which starts near 0.

**Damage.** A cut or corrupt log never raises: every complete, intact item is read, and what
was lost is counted in :attr:`Log.damage` (and in a :class:`TlogWarning` from the read that met
it). A file that is not a log raises :class:`TlogError` (a ``ValueError``); a missing one
``FileNotFoundError``; a directory ``IsADirectoryError``; a FIFO, device or socket is refused
(:class:`TlogError`) without being opened, so nothing ever blocks on it.

Every read of the file runs in Rust with the GIL released.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import numbers
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _rtloop

__all__ = [
    "Damage",
    "Log",
    "Problem",
    "TlogError",
    "TlogWarning",
    "open",
    "read",
    "to_pandas",
]

TlogError = _rtloop.TlogError
TlogWarning = _rtloop.TlogWarning

#: A time argument: seconds (absolute since the UNIX epoch, or relative to ``Log.origin``), or
#: a timezone-aware datetime.
Time = Union[float, int, _dt.datetime]

# int64 µs hold ±9.2e12 s; anything beyond cannot be a time in a log.
_MAX_SECONDS = 9.2e12


@dataclasses.dataclass(frozen=True)
class Problem:
    """One kind of damage in one record (or in the file), counted.

    ``kind`` is one of ``corrupt_block``, ``truncated``, ``no_schema``, ``schema_unreadable``,
    ``undecodable``; ``first_offset``/``last_offset`` are byte offsets in the file;
    ``message`` is one sentence saying what was lost.
    """

    kind: str
    record: Optional[str]
    record_id: Optional[int]
    count: int
    first_offset: int
    last_offset: int
    skips_items: bool
    message: str

    def __str__(self) -> str:
        """The sentence saying what was lost."""
        return self.message


@dataclasses.dataclass(frozen=True)
class Damage:
    """What a log lost, with byte offsets (:attr:`Log.damage`, :meth:`Log.report`).

    ``ok`` is True when nothing was lost. ``truncated_at`` is where the file is cut (the start of
    the incomplete last block), ``corrupt`` lists ``(offset, description)`` of skipped corrupt
    blocks (the first 1000; ``corrupt_count`` counts them all), ``problems`` aggregates every
    kind of damage per record, ``index`` says whether and why the file has an index block.
    """

    data_blocks: int
    has_index: bool
    index: str
    truncated_at: Optional[int]
    corrupt: List[Tuple[int, str]]
    corrupt_count: int
    problems: List[Problem]

    @property
    def ok(self) -> bool:
        """True when the log lost nothing (no cut, no corrupt block, no other problem)."""
        return not self.problems

    @property
    def lost(self) -> int:
        """Blocks and items left out entirely (corrupt blocks, the cut block, undecodable items...)."""
        return sum(p.count for p in self.problems if p.skips_items)

    def __str__(self) -> str:
        """One line per problem, or ``no damage``."""
        if self.ok:
            return f"no damage ({self.data_blocks} data blocks; index {self.index})"
        return "\n".join(p.message for p in self.problems)

    @classmethod
    def _from_native(cls, d: Dict[str, Any]) -> "Damage":
        return cls(
            data_blocks=d["data_blocks"],
            has_index=d["has_index"],
            index=d["index"],
            truncated_at=d["truncated_at"],
            corrupt=[tuple(c) for c in d["corrupt"]],
            corrupt_count=d["corrupt_count"],
            problems=[Problem(**p) for p in d["problems"]],
        )


def _warn(messages: Sequence[str]) -> None:
    import warnings

    if messages:
        # stacklevel 3: the user's call of read()/to_pandas(), not this module.
        warnings.warn("; ".join(messages), TlogWarning, stacklevel=3)


class Log:
    """An open TLOG0003 log (use :func:`open`; a context manager that closes the file).

    Methods that read the file release the GIL. Closing while another thread reads lets that
    read finish.
    """

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        """Open ``path``; see :func:`open` for the errors."""
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, not {type(path).__name__}")
        self._native = _rtloop.NativeLog(os.fsdecode(path))
        self._seek_us: Optional[int] = None

    # -- file ------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The path the log was opened with."""
        return str(self._native.path)

    @property
    def size(self) -> int:
        """File size in bytes when it was opened (bytes appended later are not read)."""
        return self._native.size

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._native.closed

    def close(self) -> None:
        """Close the file; further reads raise ``ValueError``. Closing twice is harmless."""
        self._native.close()

    def __enter__(self) -> "Log":
        """Return the log itself."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the file."""
        self.close()

    def __repr__(self) -> str:
        """``<rtloop.tlog.Log 'path' (N bytes)>``."""
        state = "closed" if self.closed else f"{self.size} bytes"
        return f"<rtloop.tlog.Log {self.path!r} ({state})>"

    # -- what is in it -----------------------------------------------------------------

    def records(self) -> Dict[str, int]:
        """Every record with a schema block → its number of intact items, in log order.

        The counts are those of ``rtloop log info`` (a record without items counts 0). The
        first call walks the whole file once (without decoding payloads); the result is cached.
        """
        return {name: count for name, count, _first, _last in self._native.records()}

    def record_span(self, name: str) -> Optional[Tuple[float, float]]:
        """First and last timestamp (seconds since the UNIX epoch) of record ``name``'s items,
        or None when it has no timestamped item. Unknown record → ``KeyError``."""
        for record, _count, first, last in self._native.records():
            if record == name:
                return None if first is None or last is None else (first / 1e6, last / 1e6)
        raise KeyError(f"the log has no record '{name}'; it has {', '.join(self.records()) or 'none'}")

    @property
    def span(self) -> Optional[Tuple[float, float]]:
        """First and last timestamp of the data (seconds since the UNIX epoch), as ``rtloop log
        info`` gives it (the bookkeeping record rtloop writes on close is left out), or None
        when no item has a timestamp. Walks the file once (cached)."""
        span = self._native.span_us()
        return None if span is None else (span[0] / 1e6, span[1] / 1e6)

    @property
    def origin(self) -> Optional[float]:
        """Timestamp (seconds since the UNIX epoch) of the first timestamped item in file order:
        where ``relative=True`` times count from. None when no item has a timestamp."""
        origin = self._native.origin_us()
        return None if origin is None else origin / 1e6

    @property
    def damage(self) -> Damage:
        """What the log lost -- a cut, corrupt blocks, data without a schema, schemas that do not
        parse -- with byte offsets, from one walk over the blocks (cached; payloads are not
        decoded: :meth:`report` also counts items that do not decode). Never raises for a
        damaged log."""
        return Damage._from_native(self._native.damage())

    def report(self) -> Damage:
        """Like :attr:`damage`, but also decodes every item (as ``rtloop log info`` does), so
        items that do not decode against their schema are counted too. Costs a full decode."""
        return Damage._from_native(self._native.report())

    def schema(self, name: str) -> Dict[str, Any]:
        """Record ``name``'s schema as a JSON Schema dict (what ``rtloop log info --json`` shows).

        Unknown record → ``KeyError``; a schema that does not parse → :class:`TlogError`."""
        return json.loads(self._native.schema_json(_check_name(name)))

    # -- time ----------------------------------------------------------------------------

    def _to_us(self, value: Optional[Time], what: str, relative: bool) -> Optional[int]:
        """A time argument as µs since the epoch (None stays None)."""
        if value is None:
            return None
        if isinstance(value, _dt.datetime):
            if value.tzinfo is None:
                raise ValueError(
                    f"{what} is a naive datetime: give a timezone-aware one (e.g. tzinfo=datetime.timezone.utc)"
                )
            if relative:
                raise ValueError(f"{what} is a datetime, which is absolute: drop relative=True")
            # Whole µs from the datetime's own fields (no float rounding).
            delta = value - _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
            return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{what} must be seconds (an int or float) or a datetime, not {type(value).__name__}")
        seconds = float(value)
        if not math.isfinite(seconds) or abs(seconds) > _MAX_SECONDS:
            raise ValueError(f"{what} is {seconds}: give a finite number of seconds between -9.2e12 and 9.2e12")
        us = int(round(seconds * 1e6))
        if relative:
            origin = self._native.origin_us()
            if origin is None:
                raise ValueError(f"{what} is relative to the first timestamped item, and the log has none")
            us += origin
        return us

    def _bounds(
        self, start: Optional[Time], end: Optional[Time], relative: bool
    ) -> Tuple[Optional[int], Optional[int]]:
        from_us = self._to_us(start, "start", relative)
        to_us = self._to_us(end, "end", relative)
        if from_us is None:
            from_us = self._seek_us
        if from_us is not None and to_us is not None and from_us > to_us:
            raise ValueError(f"start is after end ({from_us / 1e6} s > {to_us / 1e6} s): give a start before the end")
        return from_us, to_us

    def seek(self, time: Optional[Time], *, relative: bool = False) -> int:
        """Position later :meth:`items` and :meth:`read` calls (those without a ``start``) at the
        first item whose timestamp is at or after ``time``, and return the byte offset of that
        item's block (the file size when there is none).

        The position is found by binary search over the file's seek markers (about one a
        second), then a short linear walk, so seeking in a big log reads little of it. Items
        without a timestamp are not yielded once a position is set. ``seek(None)`` goes back to
        the beginning (and returns the offset of the first data block).
        """
        us = self._to_us(time, "time", relative)
        if us is None:
            self._seek_us = None
            return self._native.seek(-(2**63))
        offset = self._native.seek(us)
        self._seek_us = us
        return offset

    # -- reading -------------------------------------------------------------------------

    def _read_native(
        self,
        name: str,
        start: Optional[Time],
        end: Optional[Time],
        fields: Optional[Sequence[str]],
        relative: bool,
        enums: str,
    ) -> Tuple[List[str], List[np.ndarray], np.ndarray, np.ndarray]:
        name = _check_name(name)
        if enums not in ("value", "name"):
            raise ValueError(f"enums is {enums!r}: give 'value' (integers) or 'name' (item names)")
        if fields is not None:
            if isinstance(fields, (str, bytes)) or not all(isinstance(f, str) for f in fields):
                raise TypeError("fields must be a list of column names or wildcards, e.g. ['servo.*.position']")
            fields = list(fields)
        from_us, to_us = self._bounds(start, end, relative)
        names, arrays, seconds, micros, warnings = self._native.read(
            name, from_us, to_us, fields, enums == "name"
        )
        _warn(warnings)
        return names, arrays, seconds, micros

    def read(
        self,
        name: str,
        *,
        start: Optional[Time] = None,
        end: Optional[Time] = None,
        fields: Optional[Sequence[str]] = None,
        relative: bool = False,
        enums: str = "value",
    ) -> Dict[str, np.ndarray]:
        """Every item of record ``name`` as columns: a dict of 1-D numpy arrays of equal length.

        ``"timestamp"`` comes first (float64 seconds since the UNIX epoch), then one column per
        flattened field in schema order (see the module docs for names and dtypes).
        ``start``/``end`` (inclusive, seconds; see the module docs) bound the items by time;
        without ``start`` the read begins at the :meth:`seek` position, if one is set.
        ``fields`` keeps only the columns named -- exact names, shell-style wildcards
        (``servo.*.position``), or the name of an object or array for all its leaves (``imu``);
        ``timestamp`` is always there. ``enums``: ``"value"`` (int64) or ``"name"`` (str).

        Raises ``KeyError`` for a record the log does not have (the message lists those it has)
        or a ``fields`` entry that matches no column (when some item was read);
        :class:`TlogError` when the record's schema does not parse. Damage met on the way (a
        cut, corrupt blocks, items that do not decode) is skipped and reported in one
        :class:`TlogWarning`. Decoding runs in Rust with the GIL released, straight into the
        column buffers.
        """
        names, arrays, seconds, _micros = self._read_native(name, start, end, fields, relative, enums)
        out: Dict[str, np.ndarray] = {"timestamp": seconds}
        out.update(zip(names, arrays))
        return out

    def to_pandas(
        self,
        name: str,
        *,
        start: Optional[Time] = None,
        end: Optional[Time] = None,
        fields: Optional[Sequence[str]] = None,
        relative: bool = False,
        enums: str = "value",
    ) -> "Any":
        """Record ``name`` as a pandas DataFrame: the columns of :meth:`read` (the float
        ``timestamp`` column included), indexed by a UTC ``DatetimeIndex`` named ``time`` (exact
        to the µs; NaT for an item without a timestamp). Arguments as for :meth:`read`.

        Raises ``ImportError`` when pandas is not installed (``pip install pandas``).
        """
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError("Log.to_pandas needs pandas, which is not installed: pip install pandas") from e
        names, arrays, seconds, micros = self._read_native(name, start, end, fields, relative, enums)
        index = pd.DatetimeIndex(micros.view("datetime64[us]"), name="time").tz_localize("UTC")
        data: Dict[str, np.ndarray] = {"timestamp": seconds}
        data.update(zip(names, arrays))
        return pd.DataFrame(data, index=index, copy=False)

    def items(
        self,
        name: Optional[str] = None,
        *,
        start: Optional[Time] = None,
        end: Optional[Time] = None,
        relative: bool = False,
        raw: bool = False,
        flat: bool = False,
    ) -> Iterator[Tuple[str, Optional[float], Any]]:
        """Stream items in file order as ``(record name, timestamp, value)`` tuples.

        ``timestamp`` is float seconds since the UNIX epoch (None for an item without one).
        ``value`` is the record as nested Python values: objects → dict, arrays → list, enums →
        their name (the integer when unnamed), optionals → the value or None, timestamps and
        durations inside → float seconds, bytes → bytes. ``flat=True`` gives a flat dict keyed
        by the column names of :meth:`read` instead; ``raw=True`` gives the payload bytes
        undecoded (useful for a record whose schema does not parse). ``name`` limits the
        stream to one record (unknown → ``KeyError``); ``start``/``end`` as for :meth:`read`,
        and without ``start`` the stream begins at the :meth:`seek` position.

        Items are read and decoded in batches with the GIL released; what could not be read
        is skipped and reported in one :class:`TlogWarning` when the iteration ends.
        """
        if name is not None:
            name = _check_name(name)
        from_us, to_us = self._bounds(start, end, relative)
        return self._native.items(name, from_us, to_us, bool(raw), bool(flat))


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"the record name must be a str, not {type(name).__name__}")
    return name


def open(path: Union[str, os.PathLike]) -> Log:  # noqa: A001 - mirrors builtins.open on purpose
    """Open a TLOG0003 log for reading (only its header is read now).

    Raises ``FileNotFoundError`` (or another ``OSError`` with the path) when it cannot be
    opened, ``IsADirectoryError`` for a directory, :class:`TlogError` for a file that is not a
    log (empty, other magic bytes) and for a FIFO, device or socket, which is never opened.
    """
    return Log(path)


def read(path: Union[str, os.PathLike], name: str, **kwargs: Any) -> Dict[str, np.ndarray]:
    """``open(path).read(name, **kwargs)``, closing the file afterwards."""
    with open(path) as log:
        return log.read(name, **kwargs)


def to_pandas(path: Union[str, os.PathLike], name: str = "cycle", **kwargs: Any) -> "Any":
    """A log's record as a DataFrame in one call: ``open(path).to_pandas(name, **kwargs)``,
    closing the file afterwards (see :meth:`Log.to_pandas`)."""
    with open(path) as log:
        return log.to_pandas(name, **kwargs)
