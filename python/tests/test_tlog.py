"""rtloop.tlog: logs written by ``rtloop run --log`` (and mjlib's) read into numpy and pandas.

Values are checked against the CLI's own views of the same file (``rtloop log info``,
``dump``, ``export --csv``), a hand-encoded foreign log exercises every schema type, and
damaged files (cut, corrupt, not a log) must read as far as they go without crashing.
"""

import csv
import datetime
import json
import math
import os
import pathlib
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import rtloop.tlog as tlog


# ---------------------------------------------------------------------------------------
# helpers


def run_cli(rtloop_bin, *args, check=True):
    """Run the rtloop CLI; return stdout."""
    proc = subprocess.run(
        [rtloop_bin, *map(str, args)], capture_output=True, text=True, timeout=120
    )
    if check:
        assert proc.returncode == 0, f"rtloop {' '.join(map(str, args))}: {proc.stderr}"
    return proc.stdout


def flatten_json(value, prefix=""):
    """A dumped JSON value flattened the way columns are named."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield from flatten_json(child, f"{prefix}.{key}" if prefix else key)
    elif isinstance(value, (list, bytes)):  # dump writes bytes as a list of numbers
        for i, child in enumerate(value):
            yield from flatten_json(child, f"{prefix}.{i}" if prefix else str(i))
    else:
        yield prefix, value


def same(column_value, json_value):
    """A column cell equals a dumped JSON value (JSON null is NaN or None)."""
    if json_value is None:
        return column_value is None or (isinstance(column_value, (float, np.floating)) and math.isnan(column_value))
    if isinstance(json_value, bool):
        return bool(column_value) == json_value
    if isinstance(json_value, float):
        return float(column_value) == json_value
    if isinstance(json_value, int):
        return int(column_value) == json_value
    return column_value == json_value


def dump(rtloop_bin, path, *args):
    """``rtloop log dump`` as a list of JSON objects."""
    return [json.loads(line) for line in run_cli(rtloop_bin, "log", "dump", path, *args).splitlines()]


# ---------------------------------------------------------------------------------------
# logs written by the CLI


@pytest.fixture(scope="module")
def logs(rtloop_bin, tmp_path_factory):
    """A lockstep (simulated time, deterministic) log and a real-time one, 1 s each."""
    root = tmp_path_factory.mktemp("tlog")
    lockstep = root / "lockstep.tlog"
    realtime = root / "realtime.tlog"
    run_cli(rtloop_bin, "run", "--lockstep", "--duration", "1", "--log", lockstep, "-q", check=False)
    run_cli(rtloop_bin, "run", "--duration", "1", "--log", realtime, "-q", check=False)
    assert lockstep.exists() and realtime.exists()
    return {"lockstep": lockstep, "realtime": realtime}


@pytest.fixture(scope="module")
def lockstep(logs):
    return logs["lockstep"]


@pytest.fixture(scope="module")
def info(rtloop_bin, logs):
    """``rtloop log info --json`` of each log."""
    return {k: json.loads(run_cli(rtloop_bin, "log", "info", p, "--json").splitlines()[-1]) for k, p in logs.items()}


@pytest.mark.parametrize("kind", ["lockstep", "realtime"])
def test_records_and_counts_equal_info(logs, info, kind):
    with tlog.open(logs[kind]) as log:
        records = log.records()
        expected = {r["name"]: r["items"] for r in info[kind]["records"]}
        assert records == expected
        assert records["cycle"] > 500
        columns = log.read("cycle")
        assert all(len(a) == records["cycle"] for a in columns.values())
        first, last = log.span
        assert last - first == pytest.approx(info[kind]["span_s"], abs=1e-6)
        assert log.record_span("cycle") == (columns["timestamp"][0], columns["timestamp"][-1])
        assert first <= columns["timestamp"][0] and last >= columns["timestamp"][-1]
        with pytest.raises(KeyError, match="cycle"):
            log.record_span("cycles")
        assert log.damage.ok and log.damage.has_index
        assert log.size == info[kind]["bytes"]


def test_columns_and_values_equal_csv_export(rtloop_bin, lockstep, tmp_path):
    out = tmp_path / "cycle.csv"
    run_cli(rtloop_bin, "log", "export", lockstep, "--csv", out, "--record", "cycle")
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], rows[1:]
    columns = tlog.read(lockstep, "cycle")
    assert list(columns) == header
    assert len(rows) == len(columns["timestamp"])
    for j, name in enumerate(header):
        column = columns[name]
        cells = [row[j] for row in rows]
        if column.dtype == np.bool_:
            expected = np.array([c == "1" for c in cells])
        elif column.dtype.kind in "iu":
            expected = np.array([int(c) for c in cells], dtype=column.dtype)
        else:
            # CSV floats are the shortest text that reads back as the stored float32/64.
            expected = np.array([float(c) if c else np.nan for c in cells]).astype(column.dtype)
        np.testing.assert_array_equal(column, expected, err_msg=name)


def test_values_and_timestamps_equal_dump(rtloop_bin, logs):
    for path in logs.values():
        items = dump(rtloop_bin, path, "--record", "cycle")
        columns = tlog.read(path, "cycle")
        assert len(items) == len(columns["timestamp"])
        for i in (0, 1, len(items) // 2, len(items) - 1):
            assert columns["timestamp"][i] == items[i]["time"]
            leaves = dict(flatten_json(items[i]["value"]))
            assert set(leaves) == set(columns) - {"timestamp"}
            for name, value in leaves.items():
                assert same(columns[name][i], value), (i, name, columns[name][i], value)


def test_dtypes(lockstep):
    columns = tlog.read(lockstep, "cycle")
    assert columns["timestamp"].dtype == np.float64
    assert columns["index"].dtype == np.int64
    assert columns["timed_out"].dtype == np.bool_
    assert columns["servo.0.fresh"].dtype == np.bool_
    assert columns["imu.quaternion.0"].dtype == np.float64
    assert columns["servo.11.position"].dtype.kind == "f"
    np.testing.assert_array_equal(columns["index"], np.arange(len(columns["index"])))
    assert np.all(np.diff(columns["timestamp"]) > 0)


def test_to_pandas(rtloop_bin, lockstep):
    pd = pytest.importorskip("pandas")
    with tlog.open(lockstep) as log:
        df = log.to_pandas("cycle")
        columns = log.read("cycle")
    assert list(df.columns) == list(columns)
    assert isinstance(df.index, pd.DatetimeIndex) and str(df.index.tz) == "UTC" and df.index.name == "time"
    items = dump(rtloop_bin, lockstep, "--record", "cycle")
    micros = np.array([round(item["time"] * 1e6) for item in items])
    np.testing.assert_array_equal((df.index - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(1, "us"), micros)
    np.testing.assert_array_equal(df["timestamp"].to_numpy(), columns["timestamp"])
    np.testing.assert_array_equal(df["servo.3.velocity"].to_numpy(), columns["servo.3.velocity"])
    assert tlog.to_pandas(lockstep, "cycle", fields=["servo.*.position"]).shape == (len(items), 13)


def test_to_pandas_without_pandas_says_how_to_install(lockstep, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with tlog.open(lockstep) as log, pytest.raises(ImportError, match="pip install pandas"):
        log.to_pandas("cycle")


def test_fields_select_columns(lockstep):
    with tlog.open(lockstep) as log:
        positions = log.read("cycle", fields=["servo.*.position"])
        assert list(positions) == ["timestamp"] + [f"servo.{i}.position" for i in range(12)]
        imu = log.read("cycle", fields=["imu", "index"])
        assert list(imu)[:3] == ["timestamp", "index", "imu.quaternion.0"] and len(imu) == 12
        everything = log.read("cycle")
        np.testing.assert_array_equal(positions["servo.4.position"], everything["servo.4.position"])
        with pytest.raises(KeyError, match="servo.\\*.positon"):
            log.read("cycle", fields=["servo.*.positon"])
        with pytest.raises(TypeError, match="list of column names"):
            log.read("cycle", fields="index")


def test_unknown_record_is_a_key_error_listing_records(lockstep):
    with tlog.open(lockstep) as log:
        for call in (lambda: log.read("cycles"), lambda: log.items("cycles"), lambda: log.schema("cycles")):
            with pytest.raises(KeyError, match="cycle, event"):
                call()


def test_time_bounds_seek_and_items(rtloop_bin, lockstep):
    with tlog.open(lockstep) as log:
        everything = log.read("cycle")["timestamp"]
        origin = log.origin
        assert origin == everything[0]
        part = log.read("cycle", start=0.25, end=0.5, relative=True)["timestamp"]
        micros = np.round(everything * 1e6).astype(np.int64) - round(origin * 1e6)
        np.testing.assert_array_equal(part, everything[(micros >= 250_000) & (micros <= 500_000)])
        assert 240 < len(part) < 260
        absolute = log.read("cycle", start=everything[100], end=everything[200])["timestamp"]
        np.testing.assert_array_equal(absolute, everything[100:201])
        when = datetime.datetime.fromtimestamp(everything[300], tz=datetime.timezone.utc)
        assert log.read("cycle", start=when)["timestamp"][0] == everything[300]

        offset = log.seek(everything[500])
        assert 0 < offset < log.size
        assert log.read("cycle")["timestamp"][0] == everything[500]
        name, t, value = next(iter(log.items("cycle")))
        assert (name, t, value["index"]) == ("cycle", everything[500], 500)
        log.seek(None)
        assert len(log.read("cycle")["timestamp"]) == len(everything)
        assert log.seek(everything[-1] + 10) == log.size

        for bad, error in ((float("nan"), ValueError), ("soon", TypeError), (1e20, ValueError)):
            with pytest.raises(error, match="start"):
                log.read("cycle", start=bad)
        with pytest.raises(ValueError, match="timezone-aware"):
            log.read("cycle", start=datetime.datetime(2020, 1, 1))
        with pytest.raises(ValueError, match="start is after end"):
            log.read("cycle", start=0.5, end=0.25, relative=True)
        with pytest.raises(ValueError, match="enums"):
            log.read("cycle", enums="label")


def test_items_stream_equals_dump(rtloop_bin, lockstep):
    dumped = dump(rtloop_bin, lockstep)
    with tlog.open(lockstep) as log:
        streamed = list(log.items())
        assert len(streamed) == len(dumped) == sum(log.records().values())
        for (name, t, value), item in zip(streamed, dumped):
            assert (name, t) == (item["record"], item["time"])
        # Values as dump gives them (dump sorts keys; JSON has no NaN).
        for (name, t, value), item in list(zip(streamed, dumped))[:5] + list(zip(streamed, dumped))[-3:]:
            mine, theirs = dict(flatten_json(value)), dict(flatten_json(item["value"]))
            assert mine.keys() == theirs.keys()
            assert all(same(mine[k], theirs[k]) for k in mine), name
        flat = next(iter(log.items("cycle", flat=True)))[2]
        assert list(flat) == list(log.read("cycle", end=log.origin))[1:]
        raw = next(iter(log.items("cycle", raw=True)))[2]
        assert isinstance(raw, bytes) and len(raw) > 100


def test_threads_read_the_same(lockstep):
    with tlog.open(lockstep) as log:
        expected = log.read("cycle")["servo.5.position"]
        results = []
        threads = [threading.Thread(target=lambda: results.append(log.read("cycle")["servo.5.position"])) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(results) == 3 and all(np.array_equal(r, expected) for r in results)


def test_close_and_context_manager(lockstep):
    with tlog.open(lockstep) as log:
        assert not log.closed and "lockstep.tlog" in repr(log)
    assert log.closed
    with pytest.raises(ValueError, match="closed"):
        log.read("cycle")
    log.close()


# ---------------------------------------------------------------------------------------
# damaged files and things that are not logs


def test_cut_log_reads_every_complete_item(lockstep, tmp_path):
    data = lockstep.read_bytes()
    with tlog.open(lockstep) as log:
        full = log.read("cycle")
        first_data_offset = log.seek(None)
    for cut in (first_data_offset + 1, len(data) // 4, len(data) // 2, len(data) - 13, len(data) - 1):
        path = tmp_path / f"cut{cut}.tlog"
        path.write_bytes(data[:cut])
        with tlog.open(path) as log:
            damage = log.damage
            assert not damage.ok and damage.truncated_at is not None and damage.truncated_at < cut
            assert "cut" in str(damage) and not damage.has_index
            assert [p.kind for p in damage.problems] == ["truncated"]
            with pytest.warns(tlog.TlogWarning, match="cut at byte"):
                part = log.read("cycle")
            n = len(part["timestamp"])
            assert n == log.records()["cycle"] and n <= len(full["timestamp"])
            for name in ("timestamp", "index", "servo.7.torque"):
                if n or name in part:
                    np.testing.assert_array_equal(part[name], full[name][:n])
            with pytest.warns(tlog.TlogWarning):
                assert sum(1 for _ in log.items("cycle")) == n
    # Cut before any schema block: no records, still no exception on open or damage.
    path = tmp_path / "header.tlog"
    path.write_bytes(data[:12])
    with tlog.open(path) as log:
        assert log.records() == {} and log.damage.truncated_at == 9
        with pytest.raises(KeyError, match="no records"):
            log.read("cycle")


def test_record_without_items_has_typed_columns(lockstep):
    with tlog.open(lockstep) as log:
        empty = log.read("cycle", start=0, end=0)
        assert all(len(a) == 0 for a in empty.values())
        assert empty["index"].dtype == np.int64 and empty["timed_out"].dtype == np.bool_
        # The servo array's columns appear only with items that have them.
        assert "imu.quaternion.3" in empty and "servo.0.position" not in empty


def test_corrupt_block_is_skipped_and_reported(lockstep, tmp_path):
    data = bytearray(lockstep.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "flipped.tlog"
    path.write_bytes(bytes(data))
    with tlog.open(path) as log:
        full = tlog.read(lockstep, "cycle")
        with pytest.warns(tlog.TlogWarning, match="corrupt block"):
            part = log.read("cycle")
        assert len(part["timestamp"]) == len(full["timestamp"]) - 1
        damage = log.damage
        assert damage.corrupt_count == 1 and damage.corrupt[0][0] <= len(data) // 2
        assert damage.lost == 1 and damage.problems[0].kind == "corrupt_block"
        report = log.report()
        assert report.corrupt == damage.corrupt


@pytest.mark.parametrize(
    "content",
    [b"", b"hello, world\n", bytes(range(256)) * 8, b"TLOG0002\x00", b"TLOG0003\x07"],
    ids=["empty", "text", "garbage", "other-version", "header-flags"],
)
def test_not_a_log_is_a_tlog_error(tmp_path, content):
    path = tmp_path / "not.tlog"
    path.write_bytes(content)
    with pytest.raises(tlog.TlogError, match="not.tlog") as raised:
        tlog.open(path)
    assert isinstance(raised.value, ValueError)


def test_random_garbage_after_a_header_never_crashes(tmp_path):
    rng = np.random.default_rng(7)
    for i in range(20):
        path = tmp_path / f"garbage{i}.tlog"
        path.write_bytes(b"TLOG0003\x00" + rng.integers(0, 256, 2000, dtype=np.uint8).tobytes())
        with tlog.open(path) as log, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            log.damage
            for name in log.records():
                try:
                    log.read(name)
                except tlog.TlogError:
                    pass  # a schema that does not parse is refused with a message
                list(log.items(name, raw=True))


def test_paths_that_are_not_log_files(tmp_path):
    with pytest.raises(IsADirectoryError) as raised:
        tlog.open(tmp_path)
    assert raised.value.filename == str(tmp_path)
    missing = tmp_path / "missing.tlog"
    with pytest.raises(FileNotFoundError) as raised:
        tlog.open(missing)
    assert raised.value.filename == str(missing)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # Refused without being opened: opening a FIFO would wait for a writer.
    with pytest.raises(tlog.TlogError, match="FIFO"):
        tlog.open(fifo)
    with pytest.raises(tlog.TlogError, match="character device"):
        tlog.open("/dev/null")
    with pytest.raises(TypeError, match="path"):
        tlog.open(42)


# ---------------------------------------------------------------------------------------
# mjlib's logs

# mjlib's golden test file (crates/tlog/tests/tlog/reader.rs): schema "test" whose schema bytes
# are the placeholder "testschema", one data block "testdata" at 2020-03-10T00:00:00Z.
GOLDEN = bytes.fromhex(
    "544c4f4730303033 00"
    "0111010004746573747465737473636865 6d61"
    "02170107000020 07cd74a0050093 73df4e7465737464617461".replace(" ", "")
)
GOLDEN_TIME = 1583798400.0


def test_mjlib_golden_bytes(tmp_path):
    path = tmp_path / "golden.tlog"
    path.write_bytes(GOLDEN)
    with tlog.open(path) as log:
        assert log.records() == {"test": 1}
        assert log.span == (GOLDEN_TIME, GOLDEN_TIME) and log.origin == GOLDEN_TIME
        assert list(log.items("test", raw=True)) == [("test", GOLDEN_TIME, b"testdata")]
        # "testschema" is not a schema: the record is listed, its payload only readable raw.
        with pytest.raises(tlog.TlogError, match="does not parse.*raw=True"):
            log.read("test")
        with pytest.warns(tlog.TlogWarning, match="test"):
            assert list(log.items("test")) == []
        assert [p.kind for p in log.damage.problems] == ["schema_unreadable"]
        assert log.seek(GOLDEN_TIME) == 28 and log.seek(GOLDEN_TIME + 1e-6) == len(GOLDEN)


def _varuint(v):
    out = bytearray()
    while True:
        low, v = v & 0x7F, v >> 7
        out.append(low | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _string(s):
    raw = s.encode() if isinstance(s, str) else s
    return _varuint(len(raw)) + raw


def _field(name, schema):
    return _varuint(0) + _string(name) + _varuint(0) + schema + b"\x00"


def _object(*fields):
    return _varuint(16) + _varuint(0) + b"".join(fields) + b"\x00\x00\x00\x00\x00"


def _block(kind, body):
    return _varuint(kind) + _varuint(len(body)) + body


def foreign_log(mjlib=False):
    """A log as another writer could make it: every schema type, no CRCs, one item without a
    timestamp, a growing array, map keys that come and go, an optional, repeated names.
    ``mjlib=True`` leaves out what mjlib's Python reader cannot read (varints, repeated
    names)."""
    import struct

    point = _object(_field("x", b"\x08"), _field("y", b"\x08"))
    schema = _object(
        _field("flag", b"\x02"),
        _field("i8", b"\x03\x01"),
        _field("i16", b"\x03\x02"),
        _field("u32", b"\x04\x04"),
        _field("vi", b"\x03\x04" if mjlib else b"\x05"),
        _field("vu", b"\x06"),
        _field("f", b"\x07"),
        _field("d", b"\x08"),
        _field("name", b"\x0a"),
        _field("raw", b"\x09"),
        _field("mode", b"\x11\x06" + _varuint(2) + b"\x00" + _string("stop") + b"\x01" + _string("run")),
        _field("pts", b"\x12" + point),
        _field("fixed", b"\x13\x02\x03\x02"),
        _field("tags", b"\x14\x06"),
        _field("opt", b"\x15\x01\x08\x00"),
        _field("stamp", b"\x16"),
        _field("dur", b"\x17"),
        _field("timestamp", b"\x08"),
        _field("dup", b"\x08"),
        _field("dup2" if mjlib else "dup", b"\x08"),
    )
    out = b"TLOG0003\x00" + _block(1, _varuint(1) + _varuint(0) + _string("rec") + schema)
    expected = []
    for i in range(5):
        pts = [(i + k, -k) for k in range((0, 1, 3, 1, 2)[i])]
        tags = {"a": i} if i % 2 == 0 else {"b": 10 * i}
        payload = b"".join(
            [
                bytes([i % 2]),
                struct.pack("<b", -i),
                struct.pack("<h", -300 * i),
                struct.pack("<I", 4_000_000_000 + i),
                struct.pack("<i", -(i + 1)) if mjlib else _varuint(2 * i + 1),  # zigzag of -(i + 1)
                _varuint(300 * i),
                struct.pack("<f", 0.1 * i),
                struct.pack("<d", 1.5 * i),
                _string(f"n{i}"),
                _string(bytes([i, 255])),
                _varuint((0, 1, 5, 1, 0)[i]),
                _varuint(len(pts)) + b"".join(struct.pack("<dd", x, y) for x, y in pts),
                struct.pack("<hh", i, -i),
                _varuint(len(tags)) + b"".join(_string(k) + _varuint(v) for k, v in tags.items()),
                b"\x00" if i % 2 == 0 else b"\x01" + struct.pack("<d", i / 4),
                struct.pack("<q", 1_600_000_000_000_000 + i),
                struct.pack("<q", -1_500_000),
                struct.pack("<d", 7.0 + i),
                struct.pack("<d", 1.0),
                struct.pack("<d", 2.0),
            ]
        )
        if i == 3:  # no timestamp
            out += _block(2, _varuint(1) + _varuint(0) + payload)
        else:
            out += _block(2, _varuint(1) + _varuint(2) + struct.pack("<q", 1_700_000_000_000_000 + i) + payload)
        expected.append({"pts": pts, "tags": tags})
    return out, expected


def test_foreign_log_every_type(rtloop_bin, tmp_path):
    data, expected = foreign_log()
    path = tmp_path / "foreign.tlog"
    path.write_bytes(data)
    with tlog.open(path) as log:
        assert log.records() == {"rec": 5} and log.damage.ok
        cols = log.read("rec")
    assert list(cols) == [
        "timestamp", "flag", "i8", "i16", "u32", "vi", "vu", "f", "d", "name", "raw", "mode",
        "pts.0.x", "pts.0.y", "pts.1.x", "pts.1.y", "pts.2.x", "pts.2.y",
        "fixed.0", "fixed.1", "tags.a", "tags.b", "opt", "stamp", "dur", "timestamp#2", "dup", "dup#2",
    ]  # fmt: skip
    assert np.isnan(cols["timestamp"][3]) and cols["timestamp"][4] == 1_700_000_000.000004
    assert cols["flag"].tolist() == [False, True, False, True, False]
    assert cols["i8"].dtype == np.int64 and cols["i8"].tolist() == [0, -1, -2, -3, -4]
    assert cols["i16"].tolist() == [0, -300, -600, -900, -1200]
    assert cols["u32"].dtype == np.int64 and cols["u32"][4] == 4_000_000_004
    assert cols["vi"].tolist() == [-1, -2, -3, -4, -5]
    assert cols["f"].dtype == np.float32 and cols["f"][3] == np.float32(0.1 * 3)
    assert cols["name"].dtype == object and cols["name"].tolist() == ["n0", "n1", "n2", "n3", "n4"]
    assert cols["raw"][2] == bytes([2, 255])
    assert cols["mode"].dtype == np.int64 and cols["mode"].tolist() == [0, 1, 5, 1, 0]
    # The array's items: as many columns as its longest occurrence, NaN where shorter.
    np.testing.assert_array_equal(cols["pts.0.x"], [np.nan, 1, 2, 3, 4])
    np.testing.assert_array_equal(cols["pts.2.y"], [np.nan, np.nan, -2, np.nan, np.nan])
    assert cols["fixed.1"].tolist() == [0, -1, -2, -3, -4]
    # Integers with missing rows become float64 with NaN.
    np.testing.assert_array_equal(cols["tags.a"], [0, np.nan, 2, np.nan, 4])
    np.testing.assert_array_equal(cols["tags.b"], [np.nan, 10, np.nan, 30, np.nan])
    np.testing.assert_array_equal(cols["opt"], [np.nan, 0.25, np.nan, 0.75, np.nan])
    assert cols["stamp"][1] == 1_600_000_000.000001 and cols["dur"][0] == -1.5
    assert cols["timestamp#2"].tolist() == [7, 8, 9, 10, 11]
    assert cols["dup"][0] == 1 and cols["dup#2"][0] == 2
    with tlog.open(path) as log:
        named = log.read("rec", enums="name")["mode"]
        assert named.tolist() == ["stop", "run", 5, "run", "stop"]
        # The stream agrees with rtloop log dump (enums by name, NaN as null).
        dumped = dump(rtloop_bin, path)
        for (name, t, value), item in zip(log.items(), dumped):
            assert name == item["record"] and (t == item["time"] or (t is None and item["time"] is None))
            mine, theirs = dict(flatten_json(value)), dict(flatten_json(item["value"]))
            assert mine.keys() == theirs.keys()
            assert all(same(mine[k], theirs[k]) for k in mine), (mine, theirs)
        # A bound on time leaves out the item without a timestamp.
        assert len(log.read("rec", start=0)["timestamp"]) == 4


def _mjlib_reader():
    root = os.environ.get("RTLOOP_MJLIB")
    if not root or not (pathlib.Path(root) / "mjlib" / "telemetry" / "file_reader.py").exists():
        pytest.skip("set RTLOOP_MJLIB to a directory holding mjlib/telemetry/file_reader.py to compare with mjlib")
    pytest.importorskip("snappy", reason="mjlib's reader needs python-snappy")
    sys.path.insert(0, root)
    try:
        from mjlib.telemetry import file_reader
    finally:
        sys.path.remove(root)
    return file_reader


def test_values_equal_mjlib_reader(lockstep, tmp_path):
    file_reader = _mjlib_reader()
    mj = list(file_reader.FileReader(str(lockstep)).items(["cycle"]))
    columns = tlog.read(lockstep, "cycle")
    assert len(mj) == len(columns["timestamp"])
    np.testing.assert_array_equal([item.timestamp for item in mj], columns["timestamp"])
    for i in (0, len(mj) // 3, len(mj) - 1):
        data = mj[i].data
        assert columns["index"][i] == data.index and columns["cycle_us"][i] == data.cycle_us
        for k, q in enumerate(data.imu.quaternion):
            assert columns[f"imu.quaternion.{k}"][i] == q
        for s, servo in enumerate(data.servo):
            for field in ("position", "velocity", "torque", "fault", "fresh", "mode"):
                assert same(columns[f"servo.{s}.{field}"][i], getattr(servo, field)), (i, s, field)
    # mjlib's reader also reads a foreign log the way we do.
    data, _ = foreign_log(mjlib=True)
    path = tmp_path / "foreign.tlog"
    path.write_bytes(data)
    mj = list(file_reader.FileReader(str(path)).items(["rec"]))
    cols = tlog.read(path, "rec")
    assert [item.data.d for item in mj] == cols["d"].tolist()
    assert [item.data.vi for item in mj] == cols["vi"].tolist() == [-1, -2, -3, -4, -5]
    assert [int(item.data.mode) for item in mj] == cols["mode"].tolist()
    assert [item.data.opt for item in mj][:2] == [None, 0.25] and np.isnan(cols["opt"][0])
    assert [len(item.data.pts) for item in mj] == [0, 1, 3, 1, 2]


def test_hostile_schema_and_payload_are_refused_not_crashed(tmp_path):
    def log_with(schema, payload):
        return b"TLOG0003\x00" + _block(1, _varuint(1) + _varuint(0) + _string("h") + schema) + _block(
            2, _varuint(1) + _varuint(0) + payload
        )

    path = tmp_path / "hostile.tlog"
    # A fixed array of 2^40 doubles: refused before anything is allocated for it.
    path.write_bytes(log_with(_object(_field("a", b"\x13" + _varuint(1 << 40) + b"\x08")), b"\x00" * 16))
    with tlog.open(path) as log, pytest.raises(tlog.TlogError, match="items"):
        log.read("h")
    # An array claiming 2^60 items in a 3-byte payload: that item is skipped and reported.
    path.write_bytes(log_with(_object(_field("a", b"\x12\x08")), _varuint(1 << 60)))
    with tlog.open(path) as log, pytest.warns(tlog.TlogWarning, match="do not decode"):
        assert len(log.read("h")["timestamp"]) == 0
    # Many empty objects: the value budget stops the loop.
    path.write_bytes(log_with(_object(_field("a", b"\x12\x12" + _object())), _varuint(60000) * 2))
    with tlog.open(path) as log, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        log.read("h")
