"""The results store of a comparison campaign: a killed run resumes and loses only the fits
in flight (toward #29)."""

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from sklode.cli import main
from sklode.compare import compare, read_store

CAMPAIGN = ["lotka_volterra", "--methods", "wendy,adjoint", "--trials", "6", "--n-jobs", "1",
            "--no-progress"]


def _theta(records):
    return [(r["method"], r["trial"], r["status"], r.get("theta")) for r in records]


def test_a_store_is_written_as_fits_finish_and_skips_them_on_a_rerun(tmp_path):
    path = tmp_path / "campaign"  # no known extension: .sqlite is appended
    first = compare("lotka_volterra", ["wendy", "adjoint"], trials=2, as_frame=False,
                    store=path)
    assert (tmp_path / "campaign.sqlite").exists()
    assert read_store(path) == first  # the records exactly as compare returned them
    again = compare("lotka_volterra", ["wendy", "adjoint"], trials=3, as_frame=False,
                    store=path)
    stored = read_store(path)
    assert len(stored) == 6 and again[:2] == first[:2]  # trials 0-1 not refitted: same cpu_s
    plain = compare("lotka_volterra", ["wendy", "adjoint"], trials=3, as_frame=False)
    assert _theta(again) == _theta(plain)  # bit for bit in theta
    with sqlite3.connect(tmp_path / "campaign.sqlite") as db:  # any SQLite tool reads it
        rows = db.execute("SELECT method, COUNT(*) FROM records GROUP BY method").fetchall()
    assert sorted(rows) == [("adjoint", 3), ("wendy", 3)]


@pytest.mark.slow  # 7 s on two cores: the slow stage of .ci/run
def test_a_killed_campaign_resumes_to_the_uninterrupted_records(tmp_path, capsys):
    store = tmp_path / "killed.sqlite"
    command = [sys.executable, "-m", "sklode.cli", "compare", "--problem", *CAMPAIGN,
               "--store", str(store)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    try:
        while time.time() < deadline and process.poll() is None:
            if store.exists():
                try:
                    with sqlite3.connect(store, timeout=1) as db:
                        n = db.execute("SELECT COUNT(*) FROM records").fetchone()[0]
                except sqlite3.OperationalError:  # the table is not created yet
                    n = 0
                if n >= 3:
                    break
            time.sleep(0.05)
        assert process.poll() is None, "the campaign finished before it could be killed"
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        process.wait()
    survivors = read_store(store)
    assert 3 <= len(survivors) < 12  # committed fits survive the kill, none half-written
    # without --resume an existing store is not mixed into: a one-line error, status 2
    assert main(["compare", "--problem", *CAMPAIGN, "--store", str(store)]) == 2
    assert "pass --resume to continue that campaign" in capsys.readouterr().err
    assert main(["compare", "--problem", *CAMPAIGN, "--store", str(store), "--resume"]) == 0
    resumed = read_store(store)
    assert len(resumed) == 12 and len({(r["method"], r["trial"]) for r in resumed}) == 12
    uninterrupted = compare("lotka_volterra", ["wendy", "adjoint"], trials=6, n_jobs=1,
                            as_frame=False)
    order = {(r["method"], r["trial"]): r for r in resumed}
    assert _theta([order[(r["method"], r["trial"])] for r in uninterrupted]) == \
        _theta(uninterrupted)


def test_the_progress_bar_counts_what_is_left_with_an_eta(tmp_path, capsys):
    # a resumed campaign shows a bar over the fits still to run, with tqdm's rate and ETA
    pytest.importorskip("tqdm")
    path = tmp_path / "bar.sqlite"
    compare("lotka_volterra", ["wendy"], trials=1, as_frame=False, store=path)
    capsys.readouterr()
    compare("lotka_volterra", ["wendy"], trials=3, as_frame=False, store=path, progress=True)
    bar = capsys.readouterr().err.replace("\r", "\n").splitlines()
    last = [line for line in bar if line.startswith("sklode compare")][-1]
    assert "2/2" in last  # one of three fits was in the store: two left
    assert re.search(r"\[\d\d:\d\d<\d\d:\d\d", last)  # elapsed < remaining (the ETA)
    assert "fit/s" in last or "s/fit" in last
