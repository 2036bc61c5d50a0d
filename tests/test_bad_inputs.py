"""The catalogue of bad inputs (#17): every one raises ValueError/TypeError or the documented
sklode exception, with a message that names the argument, never an internal error, never a hang.

Each case is a function of the estimator class (or of nothing, for the CLI and ``compare``) that
must raise; ``pattern`` is what the message must contain, typically the argument's name and the
offending value. Every case runs under a 30 s alarm: a validation error is raised before any
numerics, in milliseconds, so the alarm only catches a hang.
"""

import datetime
import math
import signal
import warnings
from contextlib import contextmanager

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.exceptions import NotFittedError

from sklode import AdjointODE, BCDProxODE, ODEModel, WENDyODE
from sklode.cli import main
from sklode.compare import compare, compare_data
from sklode.datasets import make_trajectory
from sklode.exceptions import ConvergenceWarning, ModelError, SklodeError
from sklode.models import LotkaVolterra
from _expected import warns_by_design

ESTIMATORS = [BCDProxODE, WENDyODE, AdjointODE]
THETA0 = (2.5, 1.5, 4.5, 1.5)
# 41 samples of the BCD-prox paper's LV problem: more than each method's minimum (WENDy's 16).
DATA = make_trajectory("lotka_volterra", noise=0.1, random_state=0)
T, Y = DATA.t, DATA.Y
# Errors sklode may raise: argument errors are ValueError/TypeError (NotFittedError is both a
# ValueError and an AttributeError); the numerics' are the SklodeError family.
ALLOWED = (ValueError, TypeError, SklodeError)
# The alarm: no bad input may cost more than this before it is refused.
TIME_LIMIT = 30


@contextmanager
def time_limit(seconds):
    def _hang(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, _hang)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _raises(call, exc, pattern):
    with time_limit(TIME_LIMIT), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with pytest.raises(ALLOWED) as info:
            call()
    assert isinstance(info.value, exc), f"{type(info.value).__name__}: {info.value}"
    message = str(info.value)
    assert pattern.lower() in message.lower(), message
    # One line a user can read: no internal repr of tensors or Python objects.
    assert "tensor(" not in message and "object at 0x" not in message, message
    return message


def _with(rows):
    """A copy of the training Y with some entries replaced."""
    out = Y.copy()
    for (i, j), v in rows.items():
        out[i, j] = v
    return out


def _fit(Estimator, t=T, y=Y, **kwargs):
    kwargs.setdefault("theta0", THETA0)
    return lambda: Estimator(LotkaVolterra(), **kwargs).fit(t, y)


class WrongShape(ODEModel):
    state_names = ("prey", "predator")
    param_names = ("a", "b", "c", "d")
    default_theta = (1.0, 1.0, 1.0, 1.0)

    def rhs(self, t, x, theta):
        return x[..., :1] * theta[0]


class WrongDtype(WrongShape):
    def rhs(self, t, x, theta):
        return (x * theta[0]).to(torch.complex128)


class NaNField(WrongShape):
    def rhs(self, t, x, theta):
        return x * theta[0] * torch.nan


class NumpyInside(WrongShape):
    """np.exp on a torch tensor: a plain call works, autograd cannot go through it."""

    def rhs(self, t, x, theta):
        return x * theta[0] - theta[1] * np.exp(x)


class MathInside(WrongShape):
    def rhs(self, t, x, theta):
        return x * theta[0] * math.exp(x[..., 0])  # math on a batch: not a Python scalar


class Detached(WrongShape):
    def rhs(self, t, x, theta):
        return torch.as_tensor(np.asarray(x.detach()) * float(theta[0]))


class FloatParameter(WrongShape):
    """float(theta[0]) runs, and makes the derivative in a zero (torch warns only)."""

    def rhs(self, t, x, theta):
        return x * float(theta[0].detach()) - theta[1] * x**2


class DetachedState(WrongShape):
    """One state detached: the field is right, its Jacobian in 'prey' is lost."""

    def rhs(self, t, x, theta):
        prey = x[..., 0].detach()
        return torch.stack([theta[0] * prey - theta[1] * prey * x[..., 1],
                            theta[3] * prey * x[..., 1] - theta[2] * x[..., 1]], dim=-1)


def _model_fit(Estimator, model, **kwargs):
    return lambda: Estimator(model, theta0=THETA0, **kwargs).fit(T, Y)


# ---------------------------------------------------------------------------------------------
# Cases every estimator must refuse: (id, case(Estimator), exception, pattern)
# ---------------------------------------------------------------------------------------------
two = [T, T[:30]], [Y, Y[:30]]
COMMON = [
    # the times
    ("t-nan", lambda E: _fit(E, t=np.r_[T[:-1], np.nan]), ValueError, "t contains NaN"),
    ("t-inf", lambda E: _fit(E, t=np.r_[T[:-1], np.inf]), ValueError, "t contains infinity"),
    ("t-duplicate", lambda E: _fit(E, t=np.r_[T[:-1], T[-2]]), ValueError, "duplicate times"),
    ("t-2d", lambda E: _fit(E, t=np.c_[T, T]), ValueError, "t must have shape"),
    ("t-strings", lambda E: _fit(E, t=np.array(["day %d" % i for i in range(len(T))])),
     ValueError, "t must hold numbers"),
    ("t-complex", lambda E: _fit(E, t=T + 1j), ValueError, "complex"),
    ("t-object", lambda E: _fit(E, t=np.array([{}] * len(T))), (TypeError, ValueError), "t"),
    ("t-empty", lambda E: _fit(E, t=np.array([]), y=Y[:0]), ValueError, "n_samples=0"),
    ("t-one-sample", lambda E: _fit(E, t=T[:1], y=Y[:1]), ValueError, "n_samples=1"),
    # two samples: fewer than BCD-prox's and WENDy's minimum, and 4 values for AdjointODE's
    # 6 unknowns (4 parameters, 2 initial values)
    ("t-too-few", lambda E: _fit(E, t=T[:2], y=Y[:2]), ValueError, "at least"),
    ("t-none", lambda E: _fit(E, t=None), (TypeError, ValueError), "t"),
    # dates would become nanoseconds since 1970 (every rate fitted to 0 before this check)
    ("t-datetime64", lambda E: _fit(E, t=np.datetime64("2020-01-01") + np.arange(len(T))),
     ValueError, "t holds dates or durations"),
    ("t-timedelta64", lambda E: _fit(E, t=np.arange(len(T)) * np.timedelta64(1, "D")),
     ValueError, "np.timedelta64(1, 'D')"),
    ("t-date-objects", lambda E: _fit(E, t=[datetime.date(2020, 1, 1) + datetime.timedelta(i)
                                            for i in range(len(T))]), ValueError,
     "t holds dates"),
    ("t-pandas-dates", lambda E: _fit(E, t=pd.Series(pd.date_range("2020", periods=len(T)))),
     ValueError, "pd.Timedelta(days=1)"),
    ("t-masked", lambda E: _fit(E, t=np.ma.masked_array(T, mask=T > 3)), ValueError,
     "t has masked entries"),
    # the values
    ("Y-all-missing", lambda E: _fit(E, y=np.full_like(Y, np.nan)), ValueError,
     "no observed value"),
    ("Y-inf", lambda E: _fit(E, y=_with({(3, 0): np.inf})), ValueError, "infinity"),
    ("Y-width-model", lambda E: _fit(E, y=np.c_[Y, Y[:, :1]]), ValueError,
     "Y has 3 column(s)"),
    ("Y-width-observed", lambda E: _fit(E, observed=["prey"]), ValueError, "Y has 2 column(s)"),
    ("Y-rows", lambda E: _fit(E, y=Y[:-1]), ValueError, "different numbers of samples"),
    ("Y-transposed", lambda E: _fit(E, y=Y.T.copy()), ValueError,
     "Y of shape (2, 41) looks transposed, pass Y.T"),
    ("Y-3d", lambda E: _fit(E, y=Y[:, :, None]), ValueError, "Y"),
    ("Y-strings", lambda E: _fit(E, y=Y.astype(str).astype(object) + " mg"), ValueError,
     "Y must hold numbers"),
    ("Y-complex", lambda E: _fit(E, y=Y + 1j), ValueError, "complex"),
    ("Y-none", lambda E: _fit(E, y=None), ValueError, "y to be passed"),
    ("Y-booleans", lambda E: _fit(E, y=Y > 3), ValueError, "Y holds booleans"),
    # a DataFrame naming the states in another order would be read by position, swapped
    ("Y-columns-swapped", lambda E: _fit(E, y=pd.DataFrame(Y[:, ::-1],
                                                          columns=["predator", "prey"])),
     ValueError, "observed=['predator', 'prey']"),
    ("Y-columns-subset", lambda E: _fit(E, y=pd.DataFrame(Y[:, 1:], columns=["predator"])),
     ValueError, "observed=['predator']"),
    ("Y-empty", lambda E: _fit(E, y=np.empty((len(T), 0))), ValueError, "Y"),
    # several experiments
    ("list-lengths", lambda E: _fit(E, t=two[0], y=two[1][:1]), ValueError, "experiment"),
    ("list-t-array-Y", lambda E: _fit(E, t=two[0], y=Y), ValueError, "list"),
    ("list-empty", lambda E: _fit(E, t=[], y=[]), ValueError, "n_samples=0"),
    ("list-one-missing", lambda E: _fit(E, t=two[0], y=[Y, np.full((30, 2), np.nan)]),
     ValueError, "experiment 1"),
    ("list-rows", lambda E: _fit(E, t=two[0], y=[Y, Y[:29]]), ValueError, "experiment 1"),
    # theta0
    ("theta0-nan", lambda E: _fit(E, theta0=(2, np.nan, 4, 1)), ValueError, "theta0"),
    ("theta0-inf", lambda E: _fit(E, theta0=(2, np.inf, 4, 1)), ValueError, "theta0"),
    ("theta0-length", lambda E: _fit(E, theta0=(2, 1)), ValueError, "theta0 has 2 entries"),
    ("theta0-2d", lambda E: _fit(E, theta0=np.ones((2, 2))), ValueError,
     "theta0 must be a vector of 4 numbers"),
    ("theta0-dict-missing", lambda E: _fit(E, theta0={"a": 2, "b": 1}), ValueError,
     "theta0 gives no value for ['c', 'd']"),
    ("theta0-dict-unknown", lambda E: _fit(E, theta0=dict(zip("abcde", THETA0 + (1,)))),
     ValueError, "theta0 names ['e'], which the model does not have"),
    ("x0-dict-unknown", lambda E: _fit(E, x0={"wolf": 1.0}), ValueError,
     "x0 names ['wolf']"),
    ("theta0-strings", lambda E: _fit(E, theta0=("a", "b", "c", "d")), ValueError,
     "theta0 must be real numbers"),
    ("theta0-outside-bounds", lambda E: _fit(E, bounds=(0, 2)), ValueError,
     "theta0 starts a=2.5 outside its allowed range [0, 2]"),
    ("theta0-not-positive", lambda E: _fit(E, theta0=(2, -1, 4, 1), positive=True),
     ValueError, "theta0 starts b=-1 outside its allowed range [0, inf]"),
    # x0 and t0
    ("x0-nan-known", lambda E: _fit(E, x0=(5, np.nan), estimate_x0=False), ValueError, "x0"),
    ("x0-inf", lambda E: _fit(E, x0=(5, np.inf)), ValueError, "x0"),
    ("x0-length", lambda E: _fit(E, x0=(5, 3, 1)), ValueError, "x0 must have shape (2,)"),
    ("x0-experiments", lambda E: _fit(E, t=two[0], y=two[1], x0=np.ones((3, 2))), ValueError,
     "x0 must have shape"),
    ("x0-strings", lambda E: _fit(E, x0=("a", "b")), ValueError, "x0 must be real numbers"),
    ("x0-booleans", lambda E: _fit(E, x0=(True, False)), ValueError, "x0 holds booleans"),
    ("estimate_x0-length", lambda E: _fit(E, estimate_x0=[True, False, True]), ValueError,
     "estimate_x0"),
    ("estimate_x0-string", lambda E: _fit(E, estimate_x0="yes"), (TypeError, ValueError),
     "estimate_x0"),
    ("t0-nan", lambda E: _fit(E, t0=np.nan), ValueError, "t0"),
    ("t0-experiments", lambda E: _fit(E, t=two[0], y=two[1], t0=[0, 0, 0]), ValueError, "t0"),
    ("t0-after-data", lambda E: _fit(E, t0=1.0), ValueError, "t0"),
    # observed
    ("observed-range", lambda E: _fit(E, observed=[0, 2]), ValueError, "observed"),
    ("observed-name", lambda E: _fit(E, observed=["prey", "wolf"]), ValueError, "wolf"),
    ("observed-duplicate", lambda E: _fit(E, observed=[0, 0]), ValueError, "observed"),
    ("observed-empty", lambda E: _fit(E, observed=[], y=Y[:, :0]), ValueError, "observed"),
    # bounds, fixed, positive
    ("bounds-crossed", lambda E: _fit(E, bounds=(3, 1)), ValueError, "bounds"),
    ("bounds-nan", lambda E: _fit(E, bounds=(np.nan, 10)), ValueError, "bounds"),
    ("bounds-length", lambda E: _fit(E, bounds=([0, 0], [9, 9])), ValueError, "bounds"),
    # a one-element list is not a scalar: scipy refuses it too (it was broadcast silently)
    ("bounds-one-of-four", lambda E: _fit(E, bounds=([0.0], [9.0])), ValueError,
     "4 numbers, one per entry ('a', 'b', 'c', 'd')"),
    ("bounds-not-a-pair", lambda E: _fit(E, bounds=(0, 1, 2)), ValueError, "bounds"),
    ("fixed-name", lambda E: _fit(E, fixed={"z": 1.0}), ValueError, "'z'"),
    ("fixed-nan", lambda E: _fit(E, fixed={"a": np.nan}), ValueError, "fixed"),
    ("fixed-not-a-dict", lambda E: _fit(E, fixed=[1.0]), (TypeError, ValueError), "fixed"),
    ("positive-length", lambda E: _fit(E, positive=[True, False]), ValueError, "positive"),
    # the stopping and integration settings
    ("tol-negative", lambda E: _fit(E, tol=-1.0), ValueError, "tol"),
    ("tol-zero", lambda E: _fit(E, tol=0.0), ValueError, "tol"),
    ("tol-nan", lambda E: _fit(E, tol=np.nan), ValueError, "tol"),
    ("max_iter-zero", lambda E: _fit(E, max_iter=0), ValueError, "max_iter"),
    ("max_iter-float", lambda E: _fit(E, max_iter=2.5), (TypeError, ValueError), "max_iter"),
    ("max_iter-string", lambda E: _fit(E, max_iter="10"), (TypeError, ValueError),
     "max_iter"),
    ("rtol-negative", lambda E: _fit(E, rtol=-1e-6), ValueError, "rtol"),
    ("atol-negative", lambda E: _fit(E, atol=-1e-6), ValueError, "atol"),
    ("integrator-unknown", lambda E: _fit(E, integrator="Euler4"), ValueError, "integrator"),
    ("noise_kind-unknown", lambda E: _fit(E, noise_kind="percent"), ValueError, "noise_kind"),
    ("sigma-negative", lambda E: _fit(E, sigma=-0.1), ValueError, "sigma"),
    ("sigma-nan", lambda E: _fit(E, sigma=np.nan), ValueError, "sigma"),
    ("verbose-string", lambda E: _fit(E, verbose="loud"), (TypeError, ValueError), "verbose"),
    # the model
    ("model-not-a-model", lambda E: lambda: E("LotkaVolterra").fit(T, Y), ModelError,
     "model must be an sklode.ODEModel"),
    ("model-shape", lambda E: _model_fit(E, WrongShape()), ModelError, "shape"),
    ("model-dtype", lambda E: _model_fit(E, WrongDtype()), ModelError, "dtype"),
    ("model-nan", lambda E: _model_fit(E, NaNField()), SklodeError, "finite"),
    # numpy or math inside rhs: torch's own errors (or none, and no derivatives) before
    ("model-numpy", lambda E: _model_fit(E, NumpyInside()), ModelError,
     "not numpy or math functions"),
    ("model-math", lambda E: _model_fit(E, MathInside()), ModelError,
     "not numpy or math functions"),
    ("model-detached", lambda E: _model_fit(E, Detached()), ModelError,
     "depends on neither x nor theta"),
    ("model-float-parameter", lambda E: _model_fit(E, FloatParameter()), ModelError,
     "changes with the parameter 'a'"),
    ("model-detached-state", lambda E: _model_fit(E, DetachedState()), ModelError,
     "changes with the state 'prey'"),
]


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("case, exc, pattern", [c[1:] for c in COMMON],
                         ids=[c[0] for c in COMMON])
@warns_by_design('DeprecationWarning', 'UserWarning',
                 why="some bad inputs are accepted with a warning (deprecated spellings, ignored settings)")
def test_every_estimator_refuses_bad_input_by_name(Estimator, case, exc, pattern):
    Y_before, T_before = Y.copy(), T.copy()
    _raises(case(Estimator), exc, pattern)
    np.testing.assert_array_equal(Y, Y_before)  # nothing written into the caller's arrays
    np.testing.assert_array_equal(T, T_before)


# ---------------------------------------------------------------------------------------------
# One method's own hyper-parameters
# ---------------------------------------------------------------------------------------------
OWN = [
    ("bcd-lam-negative", BCDProxODE, dict(lam=-1.0), "lam"),
    ("bcd-lam-nan", BCDProxODE, dict(lam=np.nan), "lam"),
    ("bcd-order-zero", BCDProxODE, dict(order=0), "order"),
    ("bcd-order-large", BCDProxODE, dict(order=9), "order"),
    ("bcd-order-float", BCDProxODE, dict(order=2.5), "order"),
    ("bcd-acceleration", BCDProxODE, dict(acceleration="nesterov"), "acceleration"),
    ("bcd-anderson-memory", BCDProxODE, dict(anderson_memory=0), "anderson_memory"),
    ("bcd-optimizer", BCDProxODE, dict(optimizer="adam"), "optimizer"),
    ("bcd-stop", BCDProxODE, dict(stop="never"), "stop"),
    ("bcd-substeps", BCDProxODE, dict(substeps=0), "substeps"),
    ("bcd-x0-bounds", BCDProxODE, dict(x0_bounds=(1, 0)), "x0_bounds: every lower bound"),
    ("wendy-max-test-functions", WENDyODE, dict(max_test_functions=0), "max_test_functions"),
    ("wendy-n-scales", WENDyODE, dict(n_scales=0), "n_scales"),
    ("wendy-min-radius", WENDyODE, dict(min_radius=-2), "min_radius"),
    ("wendy-x0-method", WENDyODE, dict(x0_method="guess"), "x0_method"),
    ("wendy-alpha", WENDyODE, dict(alpha=-1.0), "alpha"),
    ("wendy-bias-correction", WENDyODE, dict(bias_correction="yes"), "bias_correction"),
    ("adjoint-optimizer", AdjointODE, dict(optimizer="adam"), "optimizer"),
    ("adjoint-gradient", AdjointODE, dict(gradient="numeric"), "gradient"),
    ("adjoint-n-starts", AdjointODE, dict(n_starts=0), "n_starts"),
    ("adjoint-init", AdjointODE, dict(init="magic"), "init"),
    ("adjoint-prior-sigma", AdjointODE, dict(x0_prior=(5, 3), x0_prior_sigma=-1.0),
     "x0_prior_sigma"),
    ("adjoint-invariant-weight", AdjointODE, dict(invariant_weight=-1.0), "invariant_weight"),
    ("adjoint-n-jobs", AdjointODE, dict(n_jobs=0, n_starts=2), "n_jobs"),
    ("adjoint-sigma-width", AdjointODE, dict(sigma=[1.0, 1.0, 1.0]), "sigma"),
]


@pytest.mark.parametrize("Estimator, kwargs, pattern", [c[1:] for c in OWN],
                         ids=[c[0] for c in OWN])
def test_each_method_refuses_its_own_bad_settings_by_name(Estimator, kwargs, pattern):
    _raises(_fit(Estimator, **kwargs), ValueError, pattern)


# ---------------------------------------------------------------------------------------------
# predict and score
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fitted():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return {E: E(LotkaVolterra(), theta0=THETA0).fit(T, Y) for E in ESTIMATORS}


AFTER_FIT = [
    ("predict-nan-time", lambda e: e.predict(np.r_[T[:3], np.nan]), ValueError, "NaN"),
    ("predict-inf-time", lambda e: e.predict(np.r_[T[:3], np.inf]), ValueError, "infinity"),
    ("predict-2d-times", lambda e: e.predict(np.c_[T, T]), ValueError, "t must have shape"),
    ("predict-strings", lambda e: e.predict(np.array(["a", "b"])), ValueError, "t"),
    ("predict-x0-length", lambda e: e.predict(T, x0=(1, 2, 3)), ValueError, "x0"),
    ("predict-x0-nan", lambda e: e.predict(T, x0=(1, np.nan)), ValueError, "x0"),
    ("predict-t0-nan", lambda e: e.predict(T, x0=(1, 2), t0=np.nan), ValueError, "t0"),
    ("predict-t0-alone", lambda e: e.predict(T, t0=1.0), ValueError, "t0"),
    ("predict-experiments", lambda e: e.predict([T, T]), ValueError, "experiment"),
    ("score-width", lambda e: e.score(T, Y[:, :1]), ValueError, "Y has 1 column(s)"),
    ("score-rows", lambda e: e.score(T, Y[:-1]), ValueError, "different numbers of samples"),
    ("score-all-missing", lambda e: e.score(T, np.full_like(Y, np.nan)), ValueError,
     "no observed value"),
    ("score-weight-negative", lambda e: e.score(T, Y, sample_weight=-np.ones(len(T))),
     ValueError, "sample_weight"),
    ("score-weight-nan", lambda e: e.score(T, Y, sample_weight=np.r_[np.nan, np.ones(40)]),
     ValueError, "sample_weight"),
    ("score-weight-length", lambda e: e.score(T, Y, sample_weight=np.ones(3)), ValueError,
     "sample_weight"),
    ("ci-level", lambda e: e.confidence_intervals(1.5), ValueError, "level"),
]


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("case, exc, pattern", [c[1:] for c in AFTER_FIT],
                         ids=[c[0] for c in AFTER_FIT])
def test_predict_and_score_refuse_bad_input_by_name(Estimator, case, exc, pattern, fitted):
    est = fitted[Estimator]
    theta = est.theta_.copy()
    _raises(lambda: case(est), exc, pattern)
    np.testing.assert_array_equal(est.theta_, theta)  # the fit is untouched


@pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("method", ["predict", "score", "confidence_intervals"])
def test_use_before_fit_raises_not_fitted(Estimator, method):
    est = Estimator(LotkaVolterra())
    args = {"predict": (T,), "score": (T, Y), "confidence_intervals": ()}[method]
    _raises(lambda: getattr(est, method)(*args), NotFittedError, "not fitted yet")


# ---------------------------------------------------------------------------------------------
# compare and the command line
# ---------------------------------------------------------------------------------------------
COMPARE = [
    ("compare-problem", lambda: compare("lotka_voltera", ["adjoint"], trials=1), "lotka_voltera"),
    ("compare-method", lambda: compare("lotka_volterra", ["nope"], trials=1), "nope"),
    ("compare-trials", lambda: compare("lotka_volterra", ["adjoint"], trials=0), "trials"),
    ("compare-noise", lambda: compare("lotka_volterra", ["adjoint"], trials=1, noise=-1.0),
     "noise"),
    ("compare-data-width", lambda: compare_data(T, Y[:, :1], LotkaVolterra(), ["adjoint"]),
     "Y has 1 column(s)"),
    ("compare-data-model", lambda: compare_data(T, Y, "LV", ["adjoint"]), "model"),
]


@pytest.mark.parametrize("case, pattern", [c[1:] for c in COMPARE], ids=[c[0] for c in COMPARE])
def test_compare_refuses_bad_arguments_by_name(case, pattern):
    _raises(case, (ValueError, TypeError), pattern)


def _csv(tmp_path, text):
    path = tmp_path / "data.csv"
    path.write_text(text)
    return str(path)


GOOD_CSV = "t,prey,predator\n" + "\n".join(f"{t},{a},{b}" for t, (a, b) in zip(T, Y)) + "\n"
CLI = [
    ("cli-model", lambda p: ["fit", p, "--model", "LotkaVoltera"], GOOD_CSV, "LotkaVoltera"),
    ("cli-theta0", lambda p: ["fit", p, "--model", "LotkaVolterra", "--theta0", "1,x,3,4"],
     GOOD_CSV, "theta0"),
    ("cli-time-column", lambda p: ["fit", p, "--model", "LotkaVolterra", "--time-column",
                                   "time"], GOOD_CSV, "time"),
    ("cli-text-data", lambda p: ["fit", p, "--model", "LotkaVolterra"],
     GOOD_CSV.replace("\n0.1,", "\nabc,", 1), "row 3, column 't': 'abc' is not a number"),
    ("cli-ragged-row", lambda p: ["fit", p, "--model", "LotkaVolterra"],
     GOOD_CSV.replace("\n0.1,", "\n0.1,1,", 1), "row 3 has a different number of cells"),
    ("cli-empty-file", lambda p: ["fit", p, "--model", "LotkaVolterra"], "", "data.csv"),
    ("cli-duplicate-times", lambda p: ["fit", p, "--model", "LotkaVolterra"],
     GOOD_CSV + GOOD_CSV.splitlines()[-1] + "\n", "duplicate"),
    ("cli-compare-trials", lambda p: ["compare", "--problem", "lotka_volterra", "--trials", "0",
                                      "--no-progress"], GOOD_CSV, "trials"),
    ("cli-compare-method", lambda p: ["compare", "--problem", "lotka_volterra", "--methods",
                                      "nope", "--no-progress"], GOOD_CSV, "nope"),
]


@pytest.mark.parametrize("argv, text, pattern", [c[1:] for c in CLI], ids=[c[0] for c in CLI])
def test_the_command_line_turns_each_error_into_one_line(argv, text, pattern, tmp_path, capsys):
    with time_limit(TIME_LIMIT):
        status = main(argv(_csv(tmp_path, text)))
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err, captured.err
    assert captured.err.startswith("sklode ") and pattern.lower() in captured.err.lower()
