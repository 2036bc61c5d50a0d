"""The same answer every time (#17): a ``random_state`` gives bit-identical results run to run
and for any ``n_jobs``; fits in threads equal serial fits; a ``compare`` of 200 fits in
parallel returns every record and leaves no worker process or thread behind.
(The Dask backend's identical records are in test_parallel.py.)"""

import os
import pickle
import sys
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from joblib import parallel_config

from sklode import AdjointODE, BCDProxODE, WENDyODE
from sklode.compare import compare
from sklode.datasets import make_trajectory
from sklode.models import LotkaVolterra

ESTIMATORS = [BCDProxODE, WENDyODE, AdjointODE]
THETA0 = (2.5, 1.5, 4.5, 1.5)
_TIMING = {"cpu_s", "wall_s"}


def _fitted_bytes(est):
    """The fitted attributes as bytes: equal bytes are bit-identical results."""
    return pickle.dumps({k: v for k, v in sorted(vars(est).items()) if k.endswith("_")
                         and k != "model"})


def test_a_random_state_gives_bit_identical_data_and_starts():
    a = make_trajectory("lotka_volterra", noise=0.2, random_state=7)
    b = make_trajectory("lotka_volterra", noise=0.2, random_state=7)
    assert a.Y.tobytes() == b.Y.tobytes()
    assert a.Y.tobytes() != make_trajectory("lotka_volterra", noise=0.2,
                                            random_state=8).Y.tobytes()
    data = a
    runs = [AdjointODE(LotkaVolterra(), theta0=THETA0, n_starts=3, random_state=3,
                       n_jobs=n_jobs).fit(data.t, data.Y) for n_jobs in (1, 1, 2)]
    # run to run, and with the starts spread over two threads: the same bytes
    assert _fitted_bytes(runs[0]) == _fitted_bytes(runs[1]) == _fitted_bytes(runs[2])


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
def test_fits_in_threads_equal_serial_fits_even_with_a_shared_model(Estimator):
    # One model instance shared by every thread: its compiled-field cache is filled once,
    # concurrently, and must not mix up the fits.
    model = LotkaVolterra()
    datasets = [make_trajectory("lotka_volterra", noise=0.1, random_state=k) for k in range(6)]

    def fit(data):
        return _fitted_bytes(Estimator(model, theta0=THETA0).fit(data.t, data.Y))

    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(fit, datasets))
    serial = [_fitted_bytes(Estimator(LotkaVolterra(), theta0=THETA0).fit(d.t, d.Y))
              for d in datasets]
    assert threaded == serial


def _strip(records):
    return [{k: v for k, v in r.items() if k not in _TIMING} for r in records]


def test_compare_is_the_same_for_any_n_jobs_and_backend():
    kwargs = dict(methods=["bcdprox", "wendy", "adjoint"], trials=2, theta0_noise=0.1,
                  random_state=11, as_frame=False, progress=False)
    serial = compare("lotka_volterra", n_jobs=1, **kwargs)
    processes = compare("lotka_volterra", n_jobs=2, **kwargs)
    with parallel_config(backend="threading"), warnings.catch_warnings():
        # One thread's fit ending restores the process's filters under another's (before
        # Python 3.14), whose warning then meets the filters outside compare: this suite's
        # "error" would fail that fit (measured: 3 runs in 13). Ignored, it is only lost.
        warnings.simplefilter("ignore")
        threads = compare("lotka_volterra", n_jobs=2, **kwargs)
    assert _strip(serial) == _strip(processes)
    # in threads everything but the warnings: before Python 3.14 the warning filters and
    # the recording hook are the process's, shared by the threads (measured: a WENDy
    # fit's PoorFitWarning recorded serially and in processes, lost in a thread)
    warned = {"warnings", "warning_messages"}
    assert ([{k: v for k, v in r.items() if k not in warned} for r in _strip(serial)]
            == [{k: v for k, v in r.items() if k not in warned} for r in _strip(threads)])
    assert any(r["warnings"] for r in serial)  # the exception above is exercised
    assert all(r["status"] == "ok" for r in serial)


def _child_processes():
    me = str(os.getpid())
    count = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                parent = fh.read().rsplit(")", 1)[1].split()[1]
        except OSError:  # the process ended while we looked
            continue
        count += parent == me
    return count


def _os_threads():
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts through /proc")
# 200 fits in loky's worker processes (12-18 s: with -m slow); 40 in threads, where the GIL
# serialises them (200 took 50 s), and 40 in loky's processes by default.
@pytest.mark.parametrize("backend, trials", [pytest.param("loky", 100, marks=pytest.mark.slow),
                                             ("loky", 20), ("threading", 20)])
def test_two_hundred_fits_in_parallel_return_every_record_and_leak_nothing(backend, trials):
    kwargs = dict(methods=["wendy", "bcdprox"], n_jobs=2, as_frame=False, progress=False)
    with parallel_config(backend=backend):
        # loky keeps its two workers (and its resource tracker) for reuse by design: start
        # them first, then count; twice, because a library may start a pool thread lazily on
        # its first parallel call (one extra OS thread seen once in a clean-clone CI run
        # under the threading backend, not a per-fit leak)
        compare("lotka_volterra", trials=1, **kwargs)
        compare("lotka_volterra", trials=2, **kwargs)
        processes, os_threads = _child_processes(), _os_threads()
        python_threads = threading.active_count()
        records = compare("lotka_volterra", trials=trials, **kwargs)
    assert len(records) == 2 * trials
    assert sorted((r["method"], r["trial"]) for r in records) == sorted(
        (m, k) for m in ("wendy", "bcdprox") for k in range(trials))
    assert all(r["status"] == "ok" for r in records), {r["error"] for r in records}
    assert all(np.all(np.isfinite(r["theta"])) for r in records)
    # no worker process and no thread more than before the 200 fits
    assert _child_processes() <= processes
    # a pool thread may still be exiting when compare returns: give it a moment to go (the
    # bound stays the count before the fits)
    deadline = time.monotonic() + 5.0
    while _os_threads() > os_threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _os_threads() <= os_threads
    assert threading.active_count() <= python_threads
