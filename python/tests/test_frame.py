"""rtloop.frame: the same frames, JSON and messages as `rtloop frame encode/decode`, and the
same bytes as the official moteus package sends."""

import json
import math
import subprocess

import pytest

import rtloop
from rtloop import frame

# (kind, keyword arguments, the CLI flags that ask for the same frame)
ENCODE_CASES = [
    ("query", {}, []),
    ("query", {"id": 127}, ["--id", "127"]),
    ("stop", {}, []),
    ("stop", {"query": True}, ["--query"]),
    ("zero_velocity", {"id": 5}, ["--id", "5"]),
    ("zero_velocity", {"id": 5, "query": True}, ["--id", "5", "--query"]),
    (
        "position",
        {"position": 0.5, "velocity": 0.0, "query": True},
        ["--position", "0.5", "--velocity", "0", "--query"],
    ),
    ("position", {"position": math.nan}, ["--position", "nan"]),
    (
        "position",
        {"id": 3, "position": -1.25, "resolution": "int16"},
        ["--id", "3", "--position", "-1.25", "--resolution", "int16"],
    ),
    (
        "position",
        {"velocity": 2.0, "maximum_torque": 0.5, "resolution": "int8", "query": True},
        ["--velocity", "2", "--maximum-torque", "0.5", "--resolution", "int8", "--query"],
    ),
    (
        "position",
        {
            "position": 1.0,
            "kp_scale": 0.5,
            "kd_scale": 2.0,
            "feedforward_torque": -0.3,
            "resolution": "int32",
        },
        [
            "--position",
            "1",
            "--kp-scale",
            "0.5",
            "--kd-scale",
            "2",
            "--feedforward-torque",
            "-0.3",
            "--resolution",
            "int32",
        ],
    ),
    (
        "position",
        {
            "position": 0.1,
            "watchdog_timeout": 0.2,
            "velocity_limit": 3.0,
            "accel_limit": 10.0,
            "resolution": "float",
        },
        [
            "--position",
            "0.1",
            "--watchdog-timeout",
            "0.2",
            "--velocity-limit",
            "3",
            "--accel-limit",
            "10",
            "--resolution",
            "float",
        ],
    ),
    (
        "position",
        {"position": 0.1, "watchdog_timeout": math.nan},
        ["--position", "0.1", "--watchdog-timeout", "nan"],
    ),
]

# (kind, keyword arguments, CLI flags) that both refuse, with the same message.
ENCODE_ERRORS = [
    ("query", {"id": 0}, ["--id", "0"]),
    ("query", {"id": 200}, ["--id", "200"]),
    ("query", {"position": 1.0}, ["--position", "1"]),
    ("stop", {"resolution": "int8"}, ["--resolution", "int8"]),
    ("position", {"kp_scale": -1.0}, ["--kp-scale", "-1"]),
    ("position", {"position": math.inf}, ["--position", "inf"]),
    ("position", {"maximum_torque": math.nan}, ["--maximum-torque", "nan"]),
    ("position", {"velocity": 1e39}, ["--velocity", "1e39"]),
]

DECODE_CASES = [
    "2404000A00881300000000230D301900",
    "11001f01130d",
    "01000a0e200000003f0000000011001f01130d",
    "0x21 00 0a",
    "2100f9",
    "210080",
    "2d010000003f",
    "4101036f6b0a",
    "420130",
    "2101055050",
]

DECODE_ERRORS = ["zz", "123", "0x", "00" * 65, "2404", "1f", "ff"]


def cli(rtloop_bin, *args):
    return subprocess.run([rtloop_bin, "frame", *args], capture_output=True, text=True, timeout=30)


def cli_kind(kind):
    return kind.replace("_", "-")


@pytest.mark.parametrize("kind,kwargs,flags", ENCODE_CASES)
def test_encode_equals_the_cli(rtloop_bin, kind, kwargs, flags):
    out = cli(rtloop_bin, "encode", cli_kind(kind), *flags)
    assert out.returncode == 0, out.stderr
    f = frame.encode(kind, **kwargs)
    assert str(f) == out.stdout.strip()
    assert isinstance(f.data, bytes) and isinstance(f.arbitration_id, int)
    assert f.reply_required == (kind == "query" or kwargs.get("query", False))
    assert f.destination == kwargs.get("id", 1) and f.source == 0


@pytest.mark.parametrize("kind,kwargs,flags", ENCODE_ERRORS)
def test_encode_refuses_what_the_cli_refuses_with_its_message(rtloop_bin, kind, kwargs, flags):
    out = cli(rtloop_bin, "encode", cli_kind(kind), *flags)
    assert out.returncode == 2
    with pytest.raises(ValueError) as e:
        frame.encode(kind, **kwargs)
    assert "rtloop: " + str(e.value) == out.stderr.strip()


def test_encode_refuses_python_only_mistakes():
    with pytest.raises(ValueError, match="not a command"):
        frame.encode("jump")
    with pytest.raises(ValueError, match='resolution "int12" is not one'):
        frame.encode("position", position=1.0, resolution="int12")
    with pytest.raises(ValueError, match="--id 300 is not a servo id"):
        frame.encode("query", id=300)
    with pytest.raises(ValueError, match="--id -1 is not a servo id"):
        frame.encode("query", id=-1)
    with pytest.raises(TypeError):
        frame.encode("position", position="far")  # type: ignore[arg-type]
    # A dash is accepted as on the command line.
    assert frame.encode("zero-velocity") == frame.encode("zero_velocity")


@pytest.mark.parametrize("hexdata", DECODE_CASES)
def test_decode_equals_the_cli(rtloop_bin, hexdata):
    out = cli(rtloop_bin, "decode", hexdata)
    assert out.returncode == 0, out.stderr
    expected = json.loads(out.stdout)
    assert frame.decode(hexdata) == expected
    compact = hexdata.replace("0x", "").replace(" ", "")
    assert frame.decode(bytes.fromhex(compact)) == expected
    assert frame.decode(bytearray.fromhex(compact)) == expected


@pytest.mark.parametrize("hexdata", DECODE_ERRORS)
def test_decode_refuses_what_the_cli_refuses_with_its_message(rtloop_bin, hexdata):
    out = cli(rtloop_bin, "decode", hexdata)
    assert out.returncode == 2
    with pytest.raises(ValueError) as e:
        frame.decode(hexdata)
    assert "rtloop: " + str(e.value) == out.stderr.strip()


def test_decode_bad_types_and_sizes():
    with pytest.raises(TypeError, match="bytes or a hex string"):
        frame.decode(12)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="more than the 64"):
        frame.decode(bytes(65))
    decoded = frame.decode("2404000A00881300000000230D301900")
    assert decoded["registers"]["0x000"] == 10  # mode, an integer register
    assert decoded["registers"]["0x001"] == 0.5  # position, rev


def test_encode_round_trips_through_decode():
    f = frame.encode("position", position=0.25, velocity=-1.0, query=True)
    regs = frame.decode(f.data)["registers"]
    assert regs["0x000"] == 10 and regs["0x020"] == 0.25 and regs["0x021"] == -1.0


@pytest.fixture(scope="module")
def moteus():
    return pytest.importorskip("moteus", reason="moteus==1.1.1 is not installed: pip install moteus==1.1.1")


def moteus_resolution(moteus, name):
    return {"int8": moteus.INT8, "int16": moteus.INT16, "int32": moteus.INT32, "float": moteus.F32}[name]


MOTEUS_POSITION_CASES = [
    {"position": 0.5, "velocity": 0.0},
    {"position": math.nan, "velocity": 0.1, "maximum_torque": 1.0},
    {"position": -2.0, "feedforward_torque": 0.3, "kp_scale": 0.8, "kd_scale": 1.5, "watchdog_timeout": 0.5},
    {"velocity": 1.0, "velocity_limit": 2.0, "accel_limit": 4.0},
]


@pytest.mark.parametrize("query", [False, True])
@pytest.mark.parametrize("resolution", [None, "int8", "int16", "int32", "float"])
@pytest.mark.parametrize("registers", MOTEUS_POSITION_CASES)
def test_position_frames_equal_what_moteus_sends(moteus, registers, resolution, query):
    pr = moteus.PositionResolution()
    if resolution is not None:
        for field in vars(moteus.PositionResolution):
            if not field.startswith("_"):
                setattr(pr, field, moteus_resolution(moteus, resolution))
    for servo in (1, 42):
        command = moteus.Controller(servo, position_resolution=pr).make_position(query=query, **registers)
        ours = frame.encode("position", id=servo, query=query, resolution=resolution, **registers)
        assert ours.data == command.data
        assert ours.arbitration_id == servo | (0x8000 if command.reply_required else 0)


def test_other_frames_equal_what_moteus_sends(moteus):
    c = moteus.Controller(7)
    pairs = [
        (frame.encode("query", id=7), c.make_query()),
        (frame.encode("stop", id=7), c.make_stop()),
        (frame.encode("stop", id=7, query=True), c.make_stop(query=True)),
        (frame.encode("zero_velocity", id=7), c.make_zero_velocity()),
        (frame.encode("zero_velocity", id=7, query=True), c.make_zero_velocity(query=True)),
    ]
    for ours, theirs in pairs:
        assert ours.data == theirs.data
        assert ours.reply_required == theirs.reply_required


def test_package_exposes_frame():
    assert rtloop.frame is frame
    assert set(frame.__all__) >= {"Frame", "encode", "decode"}
