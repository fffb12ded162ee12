"""rtloop.Robot: cycles on the simulated quadruped and on a pty served by ``rtloop sim``,
argument checking, the state array, the moteus-like helpers, the GIL, missing replies."""

import math
import os
import pathlib
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import rtloop

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def robot():
    """The simulated quadruped on virtual time: deterministic, as fast as the host runs."""
    r = rtloop.Robot(wire_time=False, clock="virtual")
    try:
        yield r
    finally:
        r.close()


@pytest.fixture
def pty_bus(rtloop_bin, tmp_path):
    """``rtloop sim`` serving servos 1 and 2 behind an fdcanusb pty; yields its path."""
    path = tmp_path / "bus1"
    proc = subprocess.Popen(
        [rtloop_bin, "sim", "--fdcanusb", str(path), "--servos", "1,2", "--no-wire-time"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(500):
            if path.exists() or proc.poll() is not None:
                break
            time.sleep(0.01)
        if not path.exists():
            proc.kill()
            _, err = proc.communicate(timeout=5)
            pytest.fail(f"rtloop sim did not create {path}: {err.decode(errors='replace')}")
        yield str(path)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# --- cycles ----------------------------------------------------------------------------


def test_the_default_robot_answers_fresh_from_all_twelve(robot):
    assert len(robot) == 12
    assert robot.ids.tolist() == list(range(1, 13))
    assert robot.buses.tolist() == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    assert robot.clock == "virtual" and robot.period == pytest.approx(0.001)
    state = robot.cycle()
    assert state.missing == 0 and len(state) == 12
    assert state.fresh.dtype == np.bool_ and state.fresh.all()
    assert (state.age_cycles == 0).all() and (state.request_cycle == 1).all()
    assert np.isfinite(state.position).all() and np.isfinite(state.voltage).all()
    assert (state.fault == 0).all()
    assert state.cycle == 1 == robot.cycle_count
    imu = state.imu
    assert imu is not None and len(imu["quaternion"]) == 4 and len(imu["rate_dps"]) == 3
    assert math.isclose(sum(q * q for q in imu["quaternion"]), 1.0, rel_tol=1e-6)
    stats = robot.stats
    assert stats["cycles"] == 1 and stats["missing"] == 0 and stats["queried"] == 12


def test_servos_move_toward_the_commanded_position(robot):
    target = np.where(np.arange(12) % 2 == 0, 0.15, -0.15)
    start = robot.query().position.copy()
    for _ in range(400):
        state = robot.cycle(position=target, velocity=0.0, maximum_torque=4.0)
    assert state.time == pytest.approx(0.4, abs=0.002), "virtual time: one period per cycle"
    assert (state.mode == 10).all()
    before, after = np.abs(start - target), np.abs(state.position - target)
    assert (after < 0.25 * before).all(), (start, state.position)


def test_a_scalar_goes_to_every_servo_and_an_array_one_value_each(robot):
    for _ in range(300):
        state = robot.cycle(position=0.1, velocity=0.0)
    assert np.allclose(state.position, 0.1, atol=0.03)
    # Lists, integer arrays and float32 arrays are converted; scalars and arrays mix.
    each = np.linspace(-0.2, 0.2, 12)
    for _ in range(300):
        state = robot.cycle(position=list(each), velocity=np.zeros(12, dtype=np.int64), kp_scale=np.float32(1.0))
    assert np.allclose(state.position, each, atol=0.03)
    assert np.argsort(state.position).tolist() == list(range(12)), "value i goes to servo i"


def test_nan_position_holds_where_the_servo_is(robot):
    for _ in range(800):  # long enough to settle
        robot.cycle(position=0.1, velocity=0.0)
    held = robot.query().position.copy()
    for _ in range(200):
        state = robot.cycle(position=np.nan, velocity=0.0)
    assert (state.mode == 10).all()
    assert np.allclose(state.position, held, atol=0.002)


def test_every_position_command_carries_a_watchdog(robot):
    robot.cycle(position=0.0, velocity=0.0, watchdog_timeout=0.05)
    for _ in range(100):  # 0.1 s of virtual time with no command
        state = robot.query()
    assert (state.mode == 11).all(), "the servos latched their watchdog timeout"
    robot.stop()
    robot.cycle(position=0.0, velocity=0.0)  # no watchdog_timeout given: 0.1 s is sent
    for _ in range(150):
        state = robot.query()
    assert (state.mode == 11).all()


def test_stop_ends_in_mode_0(robot):
    for _ in range(20):
        robot.cycle(position=0.05)
    assert (robot.query().mode == 10).all()
    robot.stop()
    assert (robot.query().mode == 0).all()
    robot.zero_velocity()
    assert (robot.query().mode == 12).all()
    robot.brake()
    assert (robot.query().mode == 15).all()
    robot.cycle(mode="stop")
    assert (robot.query().mode == 0).all()


def test_virtual_time_is_deterministic_and_wire_time_is_simulated():
    def run(**kwargs):
        with rtloop.Robot(clock="virtual", drop_rate=0.1, seed=3, **kwargs) as r:
            states = [r.cycle(position=0.1 * math.sin(k / 20), velocity=0.0) for k in range(150)]
            return r.time, states

    t1, a = run(wire_time=False)
    t2, b = run(wire_time=False)
    assert t1 == t2 and 0.149 <= t1 < 0.15, "150 periods of 1 ms (the last may wait for a lost reply)"
    assert [s.time for s in a] == pytest.approx([k * 0.001 for k in range(150)])
    assert all(x.as_array().tobytes() == y.as_array().tobytes() for x, y in zip(a, b)), "bit for bit"
    assert all(s.duration == 0.0 for s in a if s.missing == 0), "no wire time: no simulated time"
    assert any(s.missing for s in a), "some replies were dropped"
    _, wired = run(wire_time=True)
    # CAN-FD frames at 1/5 Mbit/s: three commands and three replies per bus take tens of µs.
    assert all(20e-6 < s.duration < 0.001 for s in wired if s.missing == 0)


def test_state_as_array_is_one_structured_array(robot):
    state = robot.cycle(position=0.0)
    a = state.as_array()
    assert a.shape == (12,)
    assert set(a.dtype.names) == {
        "id", "bus", "mode", "position", "velocity", "torque", "q_current", "d_current",
        "motor_temperature", "temperature", "voltage", "fault", "fresh", "age_cycles", "request_cycle",
    }  # fmt: skip
    assert a["id"].tolist() == robot.ids.tolist() and a["bus"].tolist() == robot.buses.tolist()
    assert a["position"].dtype == np.float64 and a["mode"].dtype == np.int32 and a["fresh"].dtype == np.bool_
    # The attributes are views into it, read-only, and later cycles leave it alone.
    assert np.shares_memory(state.position, a)
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        state.position[0] = 1.0
    kept = a.copy()
    for _ in range(50):
        robot.cycle(position=0.2)
    assert np.array_equal(state.as_array(), kept)


# --- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"position": np.zeros(5)}, ValueError, "position has 5 values but the robot has 12 servos (ids 1..12)"),
        ({"velocity": [0.0] * 13}, ValueError, "velocity has 13 values"),
        ({"position": np.zeros((3, 4))}, ValueError, "shape (3, 4)"),
        ({"position": ["a"] * 12}, TypeError, "position must be a number"),
        ({"kp_scale": "high"}, TypeError, "kp_scale must be a number"),
        ({"position": [0.0, None] * 6}, TypeError, "dtype object"),
        ({"velocity": math.nan}, ValueError, "velocity is NaN"),
        ({"velocity": np.r_[np.zeros(2), np.nan, np.zeros(9)]}, ValueError, "velocity is NaN for servo 3 on bus 1"),
        ({"feedforward_torque": math.inf}, ValueError, "feedforward_torque is inf"),
        ({"position": -math.inf}, ValueError, "position is -inf"),
        ({"watchdog_timeout": 0}, ValueError, "watchdog_timeout 0 would hand the watchdog"),
        ({"watchdog_timeout": math.nan}, ValueError, "switch the servo's watchdog off"),
        ({"watchdog_timeout": 11.0}, ValueError, "0.01 to 10 s"),
        ({"maximum_torque": 50.0}, ValueError, "maximum_torque 50 is outside 0 to 10 N·m"),
        ({"kp_scale": -0.5}, ValueError, "kp_scale -0.5 is outside 0 to 1"),
        ({"velocity": 9.0}, ValueError, 'resolution="float"'),
        ({"mode": "dance"}, ValueError, "mode \"dance\" is unknown"),
        ({"mode": "stop", "velocity": 1.0}, ValueError, "only with mode='position'"),
    ],
)
def test_bad_cycle_arguments_raise_with_a_helpful_message(robot, kwargs, error, words):
    with pytest.raises(error) as e:
        robot.cycle(**kwargs)
    assert words in str(e.value)
    assert robot.cycle_count == 0, "nothing was sent"


def test_an_unknown_keyword_is_a_type_error(robot):
    with pytest.raises(TypeError, match="speed"):
        robot.cycle(speed=1.0)
    with pytest.raises(TypeError):
        robot.cycle(0.1)  # keyword-only


def test_a_missing_fdcanusb_device_is_file_not_found_naming_it(tmp_path):
    path = str(tmp_path / "no-such-adapter")
    with pytest.raises(FileNotFoundError) as e:
        rtloop.Robot(buses={1: f"fdcanusb:{path}"}, servos={1: [1, 2, 3]})
    assert isinstance(e.value, OSError) and e.value.filename == path and path in str(e.value)


def test_robot_files(tmp_path):
    good = tmp_path / "robot.toml"
    good.write_text('rate_hz = 500.0\n[[bus]]\nbus = 2\nuri = "sim"\nservos = [4, 5]\n')
    with rtloop.Robot(str(good), wire_time=False) as r:
        assert r.ids.tolist() == [4, 5] and r.buses.tolist() == [2, 2]
        assert r.cycle().fresh.all()
    bad = tmp_path / "bad.toml"
    bad.write_text('[[bus]]\nbus = 1\nuri = "nope"\nservos = [1]\n')
    with pytest.raises(ValueError, match="line 3.*not a bus address"):
        rtloop.Robot(bad)
    bad.write_text("[[bus]]\nbus = 1\nuri = \"sim\"\nservos = [1]\nspeed = 3\n")
    with pytest.raises(ValueError, match="unknown field"):
        rtloop.Robot(bad)
    faults = tmp_path / "faults.toml"
    faults.write_text("[faults]\ndrop_rate = 0.5\n")
    with pytest.raises(ValueError, match="drop_rate="):
        rtloop.Robot(faults)
    with pytest.raises(FileNotFoundError) as e:
        rtloop.Robot(tmp_path / "absent.toml")
    assert e.value.filename.endswith("absent.toml")


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"buses": {1: "serial:/dev/x"}, "servos": {1: [1]}}, ValueError, "unknown transport"),
        ({"buses": {1: "sim"}}, ValueError, "needs servos="),
        ({"buses": {1: "sim", 2: "sim"}, "servos": {1: [1]}}, ValueError, "bus 2 has no servos"),
        ({"servos": {1: [1, 1]}}, ValueError, "twice"),
        ({"servos": {1: [300]}}, ValueError, "outside 1 to 127"),
        ({"servos": {1: "x"}}, ValueError, "not a servo id"),
        ({"clock": "sundial"}, ValueError, "clock \"sundial\" is unknown"),
        ({"clock": "virtual", "buses": {1: "udp:127.0.0.1:9"}, "servos": {1: [1]}}, ValueError, "simulated"),
        ({"period": 0.0}, ValueError, "period 0 is out of range"),
        ({"resolution": "int8"}, ValueError, "resolution \"int8\" is unknown"),
        ({"drop_rate": 2.0}, ValueError, "drop_rate 2 is out of range"),
        ({"limits": {"speed": (0, 1)}}, ValueError, "not a command field"),
        ({"limits": {"watchdog_timeout": (0.0, 1.0)}}, ValueError, "may only narrow"),
        ({"config": "a.toml", "servos": {1: [1]}}, ValueError, "not both"),
        ({"servos": {1: [1]}, "bogus": 1}, TypeError, "bogus"),
    ],
)
def test_bad_robot_arguments_raise_with_a_helpful_message(kwargs, error, words):
    with pytest.raises(error) as e:
        rtloop.Robot(**kwargs)
    assert words in str(e.value)


def test_limits_follow_the_resolution_and_can_be_widened():
    with rtloop.Robot(wire_time=False, clock="virtual") as r:
        assert r.resolution == "int16"
        assert r.limits["position"] == pytest.approx((-3.2767, 3.2767))
    with rtloop.Robot(wire_time=False, clock="virtual", resolution="float", limits={"velocity": (-30, 30)}) as r:
        assert r.limits["velocity"] == (-30.0, 30.0) and r.limits["position"] == (-10.0, 10.0)
        assert r.cycle(position=5.0, velocity=25.0, maximum_torque=1.0).fresh.all()


def test_a_closed_robot_refuses_to_cycle():
    r = rtloop.Robot(wire_time=False)
    r.close()
    assert r.closed
    with pytest.raises(RuntimeError, match="closed"):
        r.query()


# --- moteus-like helpers ---------------------------------------------------------------


def test_controller_helpers(robot):
    c = robot.controller(5)
    assert (c.id, c.bus, c.slot) == (5, 2, 4)
    cmd = c.make_position(position=0.1, velocity=0.0, maximum_torque=2.0)
    assert isinstance(cmd, rtloop.Command) and cmd.mode == "position" and cmd.values["position"] == 0.1
    for _ in range(200):
        result = c.set_position(position=0.1, velocity=0.0)
    assert isinstance(result, rtloop.ServoResult)
    assert (result.id, result.bus, result.mode, result.fresh) == (5, 2, 10, True)
    assert abs(result.position - 0.1) < 0.03 and result.values["mode"] == 10
    # The others were only queried: never commanded, still stopped.
    state = robot.query()
    assert state.mode[4] == 10 and (np.delete(state.mode, 4) == 0).all()
    c.set_stop()
    assert c.query().mode == 0
    c.set_brake()
    assert c.query().mode == 15
    # Mixed commands in one cycle; servos not named are queried.
    robot.cycle(commands=[c.make_zero_velocity(), robot.controller(1).make_position(position=0.0)])
    state = robot.query()
    assert state.mode[4] == 12 and state.mode[0] == 10 and state.mode[1] == 0
    with pytest.raises(ValueError, match="no servo 13"):
        robot.controller(13)
    with pytest.raises(ValueError, match="twice"):
        robot.cycle(commands=[c.make_stop(), c.make_query()])
    with pytest.raises(TypeError, match="rtloop.Command"):
        robot.cycle(commands=[1])
    with pytest.raises(ValueError, match="not both"):
        robot.cycle(commands=[c.make_stop()], position=0.0)
    with pytest.raises(ValueError, match="velocity is NaN for servo 5"):
        c.set_position(position=0.0, velocity=math.nan)


def test_a_command_names_its_bus_when_an_id_is_on_two():
    with rtloop.Robot(servos={1: [1, 2], 2: [1]}, wire_time=False, clock="virtual") as r:
        with pytest.raises(ValueError, match="several buses"):
            r.cycle(commands=[rtloop.Command(1, mode="stop")])
        with pytest.raises(ValueError, match="buses"):
            r.controller(1)
        assert r.controller(1, bus=2).slot == 2
        with pytest.raises(ValueError, match="no servo 2 on bus 2"):
            r.cycle(commands=[rtloop.Command(2, bus=2, mode="stop")])


# --- threads and missing replies -------------------------------------------------------


def test_a_cycle_releases_the_gil():
    """Another Python thread keeps running while one cycle waits for its period."""
    stamps = []
    stop = threading.Event()

    def other():
        while not stop.is_set():
            stamps.append(time.monotonic())
            time.sleep(0.001)

    with rtloop.Robot(wire_time=False, period=0.3) as r:
        r.query()  # the first cycle starts at once; the next waits a period
        worker = threading.Thread(target=other)
        worker.start()
        try:
            t0 = time.monotonic()
            r.query()
            t1 = time.monotonic()
        finally:
            stop.set()
            worker.join()
    inside = [t for t in stamps if t0 < t < t1]
    # Holding the GIL would allow at most a stamp at each end (a thread switch just before
    # or after the call).
    assert len(inside) >= 10, f"{len(inside)} stamps of the other thread during the cycle"


def test_a_missing_reply_is_never_fresh():
    with rtloop.Robot(wire_time=False, clock="virtual", drop_rate=0.3, seed=7) as r:
        seen_stale = 0
        last = r.query()
        for _ in range(200):
            state = r.cycle(position=0.0, velocity=0.0)
            fresh = state.fresh
            assert state.missing == int((~fresh).sum())
            assert (state.age_cycles[fresh] == 0).all()
            stale = ~fresh & (state.age_cycles >= 0)
            assert (state.age_cycles[stale] > 0).all()
            assert (state.request_cycle[stale] < state.cycle).all()
            # A stale value is the last answer the servo gave, not a newer one.
            kept = stale & last.fresh
            assert np.array_equal(state.position[kept], last.position[kept])
            seen_stale += int(stale.sum())
            last = state
        assert seen_stale > 0
        assert r.stats["missing"] > 0


def test_a_servo_absent_from_a_real_bus_reads_as_missing(pty_bus):
    with rtloop.Robot(buses={1: f"fdcanusb:{pty_bus}"}, servos={1: [1, 2, 3]}, timeout=0.05) as r:
        state = r.query()
        for _ in range(5):
            state = r.cycle(position=math.nan, velocity=0.0)
        assert state.fresh.tolist() == [True, True, False]
        assert state.missing == 1
        assert state.age_cycles[2] == -1 and state.mode[2] == -1 and math.isnan(state.position[2])
        assert state.imu is None
        assert r.stats["missing"] >= 6


# --- the example -----------------------------------------------------------------------


def test_the_stand_example_runs_and_exits_0():
    out = subprocess.run(
        [sys.executable, str(REPO / "python" / "examples" / "stand.py"), "--duration", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 missing replies" in out.stdout and "final positions" in out.stdout


def test_a_robot_on_the_simulated_pi3hat_reads_its_attitude():
    buses = {b: "pi3hat:sim" for b in range(1, 5)}
    servos = {b: [3 * b - 2, 3 * b - 1, 3 * b] for b in range(1, 5)}
    with rtloop.Robot(buses=buses, servos=servos, clock="virtual") as r:
        states = [r.cycle(position=0.0, velocity=0.0) for _ in range(20)]
    assert all(s.missing == 0 for s in states)
    assert all(s.fresh.all() for s in states)
    # The board's SPI transactions and the wires take simulated time: well under a period.
    assert all(100e-6 < s.duration < 0.001 for s in states)
    w, x, y, z = states[-1].imu["quaternion"]
    assert w * w + x * x + y * y + z * z == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(ValueError, match="JC"):
        rtloop.Robot(buses={6: "pi3hat:sim"}, servos={6: [1]})
