"""rtloop.Robot with a body (physics=True): the simulated quadruped lies, stands up on its
servos, feels a sloped ground and a push, and repeats itself exactly on the virtual clock."""

import numpy as np
import pytest

import rtloop

STAND = np.tile([0.0, -0.1, 0.2], 4)  # abduction, hip, knee per leg, rev


def make(**kw):
    try:
        return rtloop.Robot(wire_time=False, clock="virtual", physics=True, **kw)
    except ValueError as e:
        if "built without physics" in str(e):
            pytest.skip("this rtloop package was built without physics (MATURIN_PEP517_ARGS=--features physics)")
        raise


def stand_up(robot, seconds=2.0):
    """Ramp every joint from where it lies to the stand pose over 1 s, then hold."""
    start = robot.query().position.copy()
    steps = int(seconds * 1000)
    for k in range(steps):
        x = min(1.0, k / 1000.0)
        s = x * x * (3 - 2 * x)
        robot.cycle(position=start + (STAND - start) * s, velocity=0.0, maximum_torque=8.0, watchdog_timeout=0.1)
    return robot.query()


def test_the_quadruped_lies_then_stands_up_on_its_servos():
    with make() as robot:
        assert robot.body["height_m"] < 0.1, robot.body
        state = stand_up(robot)
        body = robot.body
        assert body["height_m"] > 0.28, body
        assert abs(body["roll_deg"]) < 3 and abs(body["pitch_deg"]) < 3, body
        assert np.all(np.abs(state.position - STAND) < 0.03), state.position
        # The IMU reads the body: level, so the quaternion is nearly the identity.
        assert state.imu is not None


def test_a_sloped_ground_and_a_push_show_in_the_body():
    with make(ground_tilt=(0.0, 8.0)) as robot:
        stand_up(robot, 1.5)
        assert 5.0 < robot.body["pitch_deg"] < 11.0, robot.body
    with make() as robot:
        stand_up(robot, 1.5)
        before = robot.body["roll_deg"]
        robot.push((0.0, 120.0, 0.0), duration=0.15)
        for _ in range(300):
            robot.cycle(position=STAND, velocity=0.0, maximum_torque=8.0, watchdog_timeout=0.1)
        assert abs(robot.body["roll_deg"] - before) > 2.0, robot.body
        with pytest.raises(ValueError, match="out of range"):
            robot.push((float("nan"), 0.0, 0.0))


def test_a_run_repeats_exactly_on_the_virtual_clock():
    runs = []
    for _ in range(2):
        with make() as robot:
            state = stand_up(robot, 1.2)
            runs.append((robot.body, state.position.copy()))
    assert runs[0][0] == runs[1][0]
    assert np.array_equal(runs[0][1], runs[1][1])


def test_bad_physics_arguments_are_one_sentence():
    with pytest.raises(ValueError, match="add physics=True"):
        rtloop.Robot(clock="virtual", ground_tilt=(0.0, 5.0))
    with rtloop.Robot(clock="virtual") as plain:
        assert plain.body is None
        with pytest.raises(ValueError, match="needs a body"):
            plain.push((1.0, 0.0, 0.0))
    try:
        rtloop.Robot(clock="virtual", physics=True, ground_tilt=(0.0, 45.0))
    except ValueError as e:
        assert "built without physics" in str(e) or "ground_pitch_deg = 45 is out of range" in str(e), e
    else:
        pytest.fail("a 45° slope was accepted")
