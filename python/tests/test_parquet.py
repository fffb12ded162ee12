"""``rtloop log export --parquet`` read with DuckDB: twenty logs become one query.

Twenty short lockstep runs (simulated time: fast and deterministic) are exported with
``--dataset``; one SQL query over ``read_parquet('OUT/cycle/*.parquet')`` counts the rows of
every run — compared with ``rtloop log info --json`` for each log — and another computes, per
servo, the p99 of the cycle time and of the speed over every run, compared with numpy over the
CSV exports of the same logs. A single log's Parquet file is compared cell by cell with its
CSV export, and a directory holding a cut log and a file that is not a log is exported as far
as it goes, with exit status 1 and the skipped file named.
"""

import csv
import json
import math
import shutil
import subprocess

import duckdb
import numpy as np
import pytest

LOGS = 20
SERVOS = 12


def query(sql):
    """Rows of one SQL query (DuckDB, in memory)."""
    return duckdb.connect().execute(sql).fetchall()


def run_cli(rtloop_bin, *args, check=True):
    """Run the rtloop CLI; return the completed process."""
    proc = subprocess.run([rtloop_bin, *map(str, args)], capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, f"rtloop {' '.join(map(str, args))}: {proc.stderr}"
    return proc


def items(rtloop_bin, log, record):
    """Items of ``record`` in ``log``, as ``rtloop log info --json`` counts them."""
    info = json.loads(run_cli(rtloop_bin, "log", "info", log, "--json").stdout)
    return next(r["items"] for r in info["records"] if r["name"] == record)


def csv_rows(rtloop_bin, log, out):
    """The CSV export of the log's cycle record: header and rows."""
    run_cli(rtloop_bin, "log", "export", log, "--csv", out)
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


@pytest.fixture(scope="module")
def logs(rtloop_bin, tmp_path_factory):
    """Twenty lockstep logs of different lengths in ``logs/quad`` (the robot is the directory)."""
    root = tmp_path_factory.mktemp("parquet")
    folder = root / "logs" / "quad"
    folder.mkdir(parents=True)
    paths = []
    for i in range(LOGS):
        path = folder / f"run{i:02d}.tlog"
        # 100 to 195 cycles at 1 kHz; seeds differ so the runs do too.
        duration = 0.1 + 0.005 * i
        run_cli(rtloop_bin, "run", "--lockstep", "--duration", duration, "--seed", i, "--log", path, "-q", check=False)
        assert path.exists(), f"rtloop run did not write {path}"
        paths.append(path)
    return root, paths


@pytest.fixture(scope="module")
def dataset(rtloop_bin, logs):
    """The twenty logs as one dataset; its ``--json`` report."""
    root, _ = logs
    out = root / "dataset"
    proc = run_cli(rtloop_bin, "log", "export", "--dataset", root / "logs", "--parquet", out, "--json")
    return out, json.loads(proc.stdout.splitlines()[-1])


def test_twenty_logs_are_one_query_and_every_run_has_its_rows(rtloop_bin, logs, dataset):
    _, paths = logs
    out, report = dataset
    assert report["exported"] == LOGS and report["skipped"] == 0 and report["damaged"] == 0, report
    rows = query(
        f"SELECT robot, run, count(*) AS n, min(timestamp) < max(timestamp) AS ordered "
        f"FROM read_parquet('{out}/cycle/*.parquet') GROUP BY robot, run ORDER BY run"
    )
    assert [r[1] for r in rows] == [p.stem for p in paths]
    assert {r[0] for r in rows} == {"quad"}
    for (robot, run, n, ordered), path in zip(rows, paths):
        assert n == items(rtloop_bin, path, "cycle"), run
        assert ordered
    # The other records are datasets too, one file per run (events: maybe none, still a table).
    for record in ("event", "rtloop_log_stats"):
        count = query(f"SELECT count(DISTINCT run) FROM read_parquet('{out}/{record}/*.parquet')")[0][0]
        total = query(f"SELECT count(*) FROM read_parquet('{out}/{record}/*.parquet')")[0][0]
        assert total == sum(items(rtloop_bin, p, record) for p in paths), record
        assert count <= LOGS
    assert report["records"]["cycle"]["files"] == LOGS
    assert report["records"]["cycle"]["rows"] == sum(r[2] for r in rows)


def test_per_servo_p99_over_every_run_in_one_query(rtloop_bin, logs, dataset, tmp_path):
    _, paths = logs
    out, _ = dataset
    # One row per servo and cycle: the twelve servo slots unpivoted.
    slots = " UNION ALL ".join(
        f'SELECT run, cycle_us, "servo.{k}.id" AS servo, "servo.{k}.velocity" AS velocity '
        f"FROM read_parquet('{out}/cycle/*.parquet')"
        for k in range(SERVOS)
    )
    got = query(
        f"WITH s AS ({slots}) "
        "SELECT servo, count(*) AS samples, count(DISTINCT run) AS runs, "
        "quantile_cont(cycle_us, 0.99) AS p99_cycle_us, quantile_cont(abs(velocity), 0.99) AS p99_speed "
        "FROM s GROUP BY servo ORDER BY servo"
    )
    # The same figures from the CSV exports, with numpy (linear interpolation, as quantile_cont).
    cycle_us, speed = [], {}
    for i, path in enumerate(paths):
        header, rows = csv_rows(rtloop_bin, path, tmp_path / f"{i}.csv")
        col = {name: j for j, name in enumerate(header)}
        for row in rows:
            cycle_us.append(float(row[col["cycle_us"]]))
            for k in range(SERVOS):
                servo = int(row[col[f"servo.{k}.id"]])
                speed.setdefault(servo, []).append(abs(float(row[col[f"servo.{k}.velocity"]])))
    assert [g[0] for g in got] == sorted(speed)
    assert len(got) == SERVOS
    want_cycle = np.percentile(np.array(cycle_us), 99)
    for servo, samples, runs, p99_cycle, p99_speed in got:
        assert samples == len(cycle_us) and runs == LOGS
        assert math.isclose(p99_cycle, want_cycle, rel_tol=1e-12), (servo, p99_cycle, want_cycle)
        assert math.isclose(p99_speed, np.percentile(np.array(speed[servo]), 99), rel_tol=1e-12, abs_tol=1e-15)


def csv_value(cell, duck_type):
    """A CSV cell as the value DuckDB gives for a column of ``duck_type``."""
    if cell == "":
        return None
    if duck_type == "BOOLEAN":
        return cell == "1"
    if duck_type in ("DOUBLE", "FLOAT"):
        return float(cell)
    if duck_type in ("BIGINT", "UBIGINT"):
        return int(cell)
    return cell


def same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def test_a_single_log_reads_as_its_csv(rtloop_bin, logs, tmp_path):
    _, paths = logs
    log = paths[3]
    pq = tmp_path / "one.parquet"
    proc = run_cli(rtloop_bin, "log", "export", log, "--parquet", pq, "--record", "cycle", "--json")
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["format"] == "parquet" and report["rows"] == items(rtloop_bin, log, "cycle")
    header, rows = csv_rows(rtloop_bin, log, tmp_path / "one.csv")
    types = dict(query(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM '{pq}')"))
    assert list(types) == header
    assert types["timestamp"] == "TIMESTAMP WITH TIME ZONE"
    assert types["cycle_us"] == "DOUBLE" and types["index"] == "UBIGINT" and types["timed_out"] == "BOOLEAN"
    assert types["servo.0.state_age_cycles"] == "UBIGINT" and types["servo.0.fresh"] == "BOOLEAN"
    columns = ", ".join(f'"{name}"' for name in header[1:])
    got = query(f'SELECT epoch_us("timestamp"), {columns} FROM \'{pq}\' ORDER BY "index"')
    assert len(got) == len(rows)
    for want_row, got_row in zip(rows, got):
        seconds, micros = want_row[0].split(".")
        assert got_row[0] == int(seconds) * 1_000_000 + int(micros)
        for name, cell, value in zip(header[1:], want_row[1:], got_row[1:]):
            assert same(value, csv_value(cell, types[name])), (name, cell, value)


def test_a_directory_with_damage_is_exported_as_far_as_it_goes(rtloop_bin, logs, tmp_path):
    _, paths = logs
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(paths[0], folder / "good.tlog")
    data = paths[1].read_bytes()
    (folder / "cut.tlog").write_bytes(data[: len(data) // 2])
    (folder / "notes.txt").write_text("not a log\n")
    out = tmp_path / "ds"
    proc = run_cli(rtloop_bin, "log", "export", "--dataset", folder, "--parquet", out, "--robot", "r1", "--json", check=False)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert (report["exported"], report["skipped"], report["damaged"]) == (2, 1, 1), report
    assert report["skipped_files"][0]["file"].endswith("notes.txt")
    assert "notes.txt" in proc.stderr
    rows = dict(query(f"SELECT run, count(*) FROM read_parquet('{out}/cycle/*.parquet') GROUP BY run"))
    assert rows == {"good": items(rtloop_bin, folder / "good.tlog", "cycle"), "cut": items(rtloop_bin, folder / "cut.tlog", "cycle")}
    assert 0 < rows["cut"] < items(rtloop_bin, paths[1], "cycle")
    robots = query(f"SELECT DISTINCT robot FROM read_parquet('{out}/cycle/*.parquet')")
    assert robots == [("r1",)]
