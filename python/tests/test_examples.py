"""The examples the READMEs show that no other test file runs, run as a user runs them."""

import pathlib
import subprocess
import sys

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def test_log_to_pandas_prints_the_described_columns(rtloop_bin, tmp_path):
    log = tmp_path / "run.tlog"
    subprocess.run(
        [rtloop_bin, "run", "--lockstep", "--duration", "1", "--log", str(log), "--quiet"], check=True, timeout=120
    )
    ran = subprocess.run(
        [sys.executable, str(EXAMPLES / "log_to_pandas.py"), str(log)], capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    # df.describe() of the cycle record: its statistics rows, for servo 0's position.
    assert "servo.0.position" in ran.stdout, ran.stdout
    for row in ("count", "mean", "max"):
        assert row in ran.stdout, ran.stdout


def test_log_to_pandas_names_a_missing_log(tmp_path):
    missing = tmp_path / "nothing.tlog"
    ran = subprocess.run(
        [sys.executable, str(EXAMPLES / "log_to_pandas.py"), str(missing)], capture_output=True, text=True, timeout=60
    )
    assert ran.returncode != 0
    assert str(missing) in ran.stderr, ran.stderr
    assert "Traceback" not in ran.stderr, ran.stderr
