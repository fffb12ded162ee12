"""`rtloop run --zenoh` seen by a subscriber of the official zenoh Python package
(`eclipse-zenoh`, the same 1.10 protocol as the `zenoh` crate rtloop uses): the state and
events each robot publishes, the three remote commands, garbage on the command key, two
robots seen by one subscriber (on loopback, then from two network namespaces through a
router).

Every wait below is bounded; a count of messages is checked against the cycle indices the
messages carry (the loop's own clock), never against this machine's timing."""

import json
import os
import shutil
import socket
import subprocess
import threading
import time

import pytest
import zenoh


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Seen:
    """Everything a subscriber got, by key, decoded from JSON."""

    def __init__(self):
        self.lock = threading.Lock()
        self.by_key = {}

    def __call__(self, sample):
        key = str(sample.key_expr)
        raw = sample.payload.to_bytes()
        with self.lock:
            self.by_key.setdefault(key, []).append(json.loads(raw))

    def get(self, key):
        with self.lock:
            return list(self.by_key.get(key, []))

    def wait(self, what, predicate, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.02)
        with self.lock:
            counts = {k: len(v) for k, v in self.by_key.items()}
        raise AssertionError(f"waited {timeout} s for {what}; got {counts}")


def session(json5):
    return zenoh.open(zenoh.Config.from_json5(json5))


def local_listener(port):
    """An operator station on this machine: a peer listening on 127.0.0.1:PORT only."""
    return session(
        '{ mode: "peer", listen: { endpoints: ["tcp/127.0.0.1:%d"] }, scouting: { multicast: { enabled: false } } }'
        % port
    )


def robot_config(tmp_path, name, connect, listen="tcp/127.0.0.1:0", mode="peer"):
    path = tmp_path / f"{name}.json5"
    listen_part = f'listen: {{ endpoints: ["{listen}"] }},' if listen else ""
    path.write_text(
        f'{{ mode: "{mode}", {listen_part} connect: {{ endpoints: ["{connect}"] }}, '
        "scouting: { multicast: { enabled: false } } }\n"
    )
    return str(path)


def start_robot(rtloop_bin, zenoh_arg, name, *extra, prefix=(), duration=60):
    args = [*prefix, rtloop_bin, "run", "--zenoh", zenoh_arg, "--name", name, "--duration", str(duration), "--json"]
    return subprocess.Popen(
        [*args, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )


def finish(proc, timeout=30):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"rtloop did not stop: {err[-2000:]}")
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"no JSON summary (exit {proc.returncode}): {err[-2000:]}"
    return proc.returncode, json.loads(lines[-1]), err


def zenoh_stats(summary):
    pubs = [p for p in summary["live"]["publishers"] if p["sink"] == "zenoh"]
    assert len(pubs) == 1, summary["live"]
    return pubs[0]


def check_state(msg, name):
    assert msg["robot"] == name
    assert set(msg) >= {"stamp_us", "timing", "imu", "servos", "commands"}
    assert len(msg["servos"]) == 12 and len(msg["commands"]) == 12
    s = msg["servos"][0]
    assert set(s) >= {"bus", "id", "mode", "position", "velocity", "torque", "fault"}
    assert isinstance(msg["timing"]["index"], int)
    assert set(msg["imu"]["orientation"]) == {"x", "y", "z", "w"}


def test_state_commands_and_garbage_over_zenoh(rtloop_bin, tmp_path):
    port = free_port()
    seen = Seen()
    station = local_listener(port)
    try:
        subs = [station.declare_subscriber(k, seen) for k in ("rtloop/a/state", "rtloop/a/events", "rtloop/a/cmd/reply")]
        proc = start_robot(rtloop_bin, robot_config(tmp_path, "a", f"tcp/127.0.0.1:{port}"), "a", "--zenoh-every", "10")
        try:
            seen.wait("50 state messages", lambda: len(seen.get("rtloop/a/state")) >= 50)

            # Garbage on the command key: refused, counted, answered.
            garbage = [b"\xff\x00\x01binary", b"STOP", b"fly", b'{"command": 3}', b'{"cmd": "stop"}', b"x" * 5000, b""]
            for g in garbage:
                station.put("rtloop/a/cmd", g)
            seen.wait("the refusals", lambda: len(seen.get("rtloop/a/cmd/reply")) >= len(garbage))
            replies = seen.get("rtloop/a/cmd/reply")
            assert all(r["accepted"] is False and "give stop, zero_velocity or rearm" in r["reason"] for r in replies)
            assert any("too long" in r["reason"] for r in replies)
            refusal_events = [e for e in seen.get("rtloop/a/events") if e["kind"] == "remote_refused"]
            assert len(refusal_events) == len(garbage)

            # Hold at zero velocity: the event, then every servo commanded in mode 12.
            station.put("rtloop/a/cmd", "zero_velocity")
            seen.wait(
                "remote_zero_velocity",
                lambda: any(e["kind"] == "remote_zero_velocity" for e in seen.get("rtloop/a/events")),
            )
            seen.wait(
                "a state with every servo in mode 12",
                lambda: any(all(c["mode"] == 12 for c in m["commands"]) for m in seen.get("rtloop/a/state")),
            )
            held_at = len(seen.get("rtloop/a/state"))
            station.put("rtloop/a/cmd", '{"command": "rearm"}')
            seen.wait("remote_rearm", lambda: any(e["kind"] == "remote_rearm" for e in seen.get("rtloop/a/events")))
            seen.wait(
                "a state after the re-arm with the control law driving again",
                lambda: any(all(c["mode"] == 10 for c in m["commands"]) for m in seen.get("rtloop/a/state")[held_at:]),
            )
            station.put("rtloop/a/cmd", "stop")
            code, summary, err = finish(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        seen.wait("the shutdown event", lambda: any(e["kind"] == "shutdown" for e in seen.get("rtloop/a/events")))
        for s in subs:
            s.undeclare()
    finally:
        station.close()

    assert code == 0, err[-2000:]
    assert summary["interrupted"] is True
    accepted = [r for r in seen.get("rtloop/a/cmd/reply") if r["accepted"]]
    assert [r["command"] for r in accepted] == ["zero_velocity", "rearm", "stop"]
    z = zenoh_stats(summary)
    assert z["refused"] == len(garbage)
    assert z["detail"]["commands_accepted"] == 3
    assert summary["live"]["remote_commands"] == 3
    assert z["dropped"] == 0 and z["errors"] == 0, z
    kinds = [e["kind"] for e in seen.get("rtloop/a/events")]
    for k in ("remote_zero_velocity", "remote_rearm", "remote_stop", "shutdown"):
        assert k in kinds, kinds

    # Every 10th cycle, none lost once the subscriber was connected: the indices seen are
    # consecutive multiples of 10, as many as the loop published over that span.
    states = seen.get("rtloop/a/state")
    for m in states[:3]:
        check_state(m, "a")
    indices = [m["timing"]["index"] for m in states]
    assert all(i % 10 == 0 for i in indices)
    assert indices == sorted(set(indices)), "out of order or repeated"
    # A period the loop skipped after an overrun has no cycle (its index is never used), and
    # a message dropped at the hand-off or in the queue is counted: nothing else may be lost.
    expected = list(range(indices[0], indices[-1] + 1, 10))
    lost = len(expected) - len(indices)
    accounted = summary["skipped_periods"] + summary["live"]["handoff_dropped"] + z["dropped"]
    assert lost <= accounted, (lost, accounted, sorted(set(expected) - set(indices))[:20])
    assert len(indices) <= z["detail"]["state_messages"]
    # The rate in the loop's own time: rate / every = 100 messages per second.
    span_s = (states[-1]["stamp_us"] - states[0]["stamp_us"]) * 1e-6
    assert 90 <= (len(expected) - 1) / span_s <= 110, (len(states), span_s)


def test_zenoh_alone_is_a_loopback_peer_connecting_to_port_7447(rtloop_bin):
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed test's TIME_WAIT is no owner
        try:
            probe.bind(("127.0.0.1", 7447))
        except OSError:
            pytest.skip("port 7447 (zenoh's default) is taken on this machine")
    seen = Seen()
    station = local_listener(7447)
    try:
        sub = station.declare_subscriber("rtloop/solo/**", seen)
        proc = subprocess.Popen(
            [rtloop_bin, "run", "--zenoh", "--name", "solo", "--duration", "60", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            seen.wait("state from the peer", lambda: len(seen.get("rtloop/solo/state")) >= 5)
            station.put("rtloop/solo/cmd", "stop")
            code, summary, err = finish(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        sub.undeclare()
    finally:
        station.close()
    assert code == 0 and summary["interrupted"], err[-2000:]
    assert zenoh_stats(summary)["endpoint"].startswith("rtloop/solo/")


def test_two_robots_one_subscriber_on_loopback(rtloop_bin, tmp_path):
    port = free_port()
    seen = Seen()
    station = local_listener(port)
    procs = []
    try:
        sub = station.declare_subscriber("rtloop/*/state", seen)
        for name in ("a", "b"):
            conf = robot_config(tmp_path, name, f"tcp/127.0.0.1:{port}")
            procs.append(start_robot(rtloop_bin, conf, name, "--zenoh-every", "100"))
        seen.wait(
            "state from both robots",
            lambda: len(seen.get("rtloop/a/state")) >= 5 and len(seen.get("rtloop/b/state")) >= 5,
        )
        station.put("rtloop/*/cmd", "stop")  # one command, every robot
        results = [finish(p) for p in procs]
        sub.undeclare()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        station.close()
    for name, (code, summary, err) in zip("ab", results):
        assert code == 0 and summary["interrupted"], err[-2000:]
        check_state(seen.get(f"rtloop/{name}/state")[0], name)


def netns_available():
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip"):
        return "the ip command (iproute2) is not installed"
    probe = subprocess.run(["ip", "netns", "add", "rtloop-zprobe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"ip netns add failed: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", "rtloop-zprobe"], capture_output=True)
    return None


def sh(*args):
    r = subprocess.run(args, capture_output=True, text=True)
    assert r.returncode == 0, f"{' '.join(args)}: {r.stderr}"


def test_two_robots_in_network_namespaces_through_a_router(rtloop_bin, tmp_path):
    why = netns_available()
    if why:
        pytest.skip(why)
    tag = f"{os.getpid() % 10000}"
    subnet = 10 + os.getpid() % 200  # 10.<robot subnet>.N.x: this run's own addresses
    robots = {}
    created = []
    try:
        for n, name in enumerate(("a", "b"), start=1):
            ns = f"rtz{tag}{name}"
            host_if, ns_if = f"rtz{tag}{name}h", f"rtz{tag}{name}n"
            sh("ip", "netns", "add", ns)
            created.append(("ns", ns))
            sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
            created.append(("link", host_if))
            sh("ip", "link", "set", ns_if, "netns", ns)
            sh("ip", "addr", "add", f"10.{subnet}.{n}.1/24", "dev", host_if)
            sh("ip", "link", "set", host_if, "up")
            sh("ip", "-n", ns, "addr", "add", f"10.{subnet}.{n}.2/24", "dev", ns_if)
            sh("ip", "-n", ns, "link", "set", ns_if, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            robots[name] = (ns, f"10.{subnet}.{n}.1")
        port = free_port()
        # The router: listening on each veth's address in the root namespace only.
        router = session(
            '{ mode: "router", listen: { endpoints: [%s] }, scouting: { multicast: { enabled: false } } }'
            % ", ".join(f'"tcp/{addr}:{port}"' for _, addr in robots.values())
        )
        seen = Seen()
        procs = []
        try:
            sub = router.declare_subscriber("rtloop/*/state", seen)
            for name, (ns, addr) in robots.items():
                conf = robot_config(tmp_path, name, f"tcp/{addr}:{port}", listen=None, mode="client")
                # Refused without --allow-remote: the router is another machine.
                refused = subprocess.run(
                    ["ip", "netns", "exec", ns, rtloop_bin, "run", "--zenoh", conf, "--duration", "1"],
                    capture_output=True,
                    text=True,
                )
                assert refused.returncode == 2 and "--allow-remote" in refused.stderr, refused.stderr
                procs.append(
                    start_robot(
                        rtloop_bin, conf, name, "--allow-remote", "--zenoh-every", "100", prefix=("ip", "netns", "exec", ns)
                    )
                )
            seen.wait(
                "state from both namespaces",
                lambda: len(seen.get("rtloop/a/state")) >= 5 and len(seen.get("rtloop/b/state")) >= 5,
            )
            router.put("rtloop/*/cmd", "stop")
            results = [finish(p) for p in procs]
            sub.undeclare()
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            router.close()
        for name, (code, summary, err) in zip(robots, results):
            assert code == 0 and summary["interrupted"], err[-2000:]
            check_state(seen.get(f"rtloop/{name}/state")[0], name)
    finally:
        for kind, what in reversed(created):
            if kind == "link":
                subprocess.run(["ip", "link", "del", what], capture_output=True)
            else:
                subprocess.run(["ip", "netns", "del", what], capture_output=True)


def test_a_bad_zenoh_configuration_is_one_sentence_and_exit_2(rtloop_bin, tmp_path):
    bad = tmp_path / "bad.json5"
    bad.write_text("{ mode: ")
    remote = tmp_path / "remote.json5"
    remote.write_text('{ mode: "client", connect: { endpoints: ["tcp/10.1.2.3:7447"] } }')
    for arg, words in ((str(bad), "not a zenoh configuration"), (str(remote), "--allow-remote"), ("/nonexistent", "no such file")):
        r = subprocess.run([rtloop_bin, "run", "--zenoh", arg, "--duration", "1"], capture_output=True, text=True)
        assert r.returncode == 2, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], r.stderr


def test_garbage_on_the_command_key_does_not_move_the_loops_figures(rtloop_bin, tmp_path):
    """Lockstep (simulated time, a fixed fault seed): the same run with and without a flood
    of garbage on the command key has the same figures, to the reply. Long enough in simulated
    time (120 s, several wall seconds) that the flood arrives while it runs on a quiet machine
    too (20 s ended before the garbage was delivered)."""
    port = free_port()
    conf = robot_config(tmp_path, "g", f"tcp/127.0.0.1:{port}")
    figures = ("cycles", "overruns", "skipped_periods", "missing_replies", "timeouts", "reply_accounting")
    station = local_listener(port)
    results = []
    try:
        for flood in (False, True):
            seen = Seen()
            sub = station.declare_subscriber("rtloop/g/state", seen)
            proc = start_robot(rtloop_bin, conf, "g", "--lockstep", "--seed", "7", "--zenoh-every", "1", duration=120)
            sent = 0
            try:
                seen.wait("the first state message", lambda: len(seen.get("rtloop/g/state")) >= 1)
                # Spread over about 1.5 s: the run's command subscriber is declared after its
                # first state is out, and a flood that is over before it reaches the router
                # (a quiet machine puts 3000 in a few ms) is refused by nobody.
                while flood and proc.poll() is None and sent < 3000:
                    station.put("rtloop/g/cmd", os.urandom(1 + sent % 300))
                    sent += 1
                    time.sleep(0.0005)
                code, summary, err = finish(proc, timeout=120)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            sub.undeclare()
            assert code in (0, 1), err[-2000:]
            results.append((summary, sent))
    finally:
        station.close()
    (quiet, _), (flooded, sent) = results
    assert sent > 0, "the run ended before the flood began"
    z = zenoh_stats(flooded)
    assert 0 < z["refused"] <= sent and z["detail"]["commands_accepted"] == 0
    assert flooded["interrupted"] is False
    assert {k: quiet[k] for k in figures} == {k: flooded[k] for k in figures}
