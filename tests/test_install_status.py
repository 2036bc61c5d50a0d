"""What ``integrator="auto"`` runs on is never a secret (#57 item 3): ``show_versions`` and
``sklode info`` say it and why, and a machine where CVODES cannot be used warns once per
process instead of running LSODA in silence."""

import subprocess
import sys

import sklode


def _run(code, **env):
    import os

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={**os.environ, **env})


def test_show_versions_names_the_integrator_and_why(capsys):
    from sklode._versions import auto_integrator
    from sklode.models._native import native_unavailable_reason

    sklode.show_versions()
    out = capsys.readouterr().out
    integrator, reason = auto_integrator()
    assert f"integrator='auto': {integrator}\n  {reason}" in out
    assert "torch: " in out and "scikit-learn: " in out
    # the same verdict the solver path reaches
    assert (integrator == "CVODES") == (native_unavailable_reason() is None)


def test_a_compiler_named_in_cc_that_does_not_exist_is_the_reason():
    # CC used to be taken as one word, unchecked: the build then failed into LSODA silently
    # (asked for the route that compiles each model; the package's solver needs none)
    code = ("from sklode.models._native import native_unavailable_reason as r; print(r())")
    out = _run(code, CC="no-such-cc --flag", SKLODE_CVODES_MODEL="c").stdout
    assert "the C compiler CC='no-such-cc --flag' was not found" in out


def test_no_compiler_at_run_time_still_solves_with_cvodes(tmp_path):
    # #57 item 2: no cc on PATH, CC naming nothing, an empty build cache: a model never seen
    # before reaches the package's precompiled CVODES solver, and a fit runs on it.
    import pytest

    from sklode.models._native import route_unavailable_reason

    if route_unavailable_reason("tape") is not None:
        pytest.skip(route_unavailable_reason("tape"))
    code = ("import numpy as np, shutil, sklode\n"
            "from sklode import AdjointODE\n"
            "from sklode.datasets import make_trajectory\n"
            "from sklode.integrate import integrator_for\n"
            "from sklode.models import LotkaVolterra\n"
            "assert shutil.which('cc') is None and shutil.which('gcc') is None\n"
            "model = LotkaVolterra()\n"
            "print(integrator_for(model, 'auto'), model.native_solver().route)\n"
            "d = make_trajectory('lotka_volterra', noise=0.05, random_state=0)\n"
            "est = AdjointODE(LotkaVolterra(), theta0=(2.5, 1.5, 4.5, 1.5)).fit(d.t, d.Y)\n"
            "print(np.abs(est.theta_ - [2, 1, 4, 1]).max())\n"
            "sklode.show_versions()\n")
    empty = tmp_path / "bin"
    empty.mkdir()
    out = _run(code, PATH=str(empty), CC="no-such-cc",
               SKLODE_CACHE_DIR=str(tmp_path / "cache")).stdout.splitlines()
    assert out[0] == "CVODES tape"
    # a fit that works, not an accuracy claim: noise 0.05 on Lotka-Volterra's trajectory,
    # the fit within 0.25 of the truth (1-4) in every parameter (measured 0.105)
    assert float(out[1]) < 0.25
    assert "no C compiler needed" in "\n".join(out)
    assert not (tmp_path / "cache" / "native").exists()  # nothing was compiled


def test_auto_without_cvodes_warns_once_per_process():
    code = ("import warnings, numpy as np\n"
            "from sklode import simulate\n"
            "from sklode.models import LotkaVolterra, Rossler\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    simulate(LotkaVolterra(), [2, 1, 4, 1], [5, 3], np.linspace(0, 1, 5))\n"
            "    simulate(Rossler(), [0.2, 0.2, 3], [1, 1, 1], np.linspace(0, 1, 5))\n"
            "print(len(w)); print(w[0].message if w else '')\n")
    # CVODES made unavailable: only the per-model C route asked for, with no compiler
    out = _run(code, CC="no-such-cc", SKLODE_CVODES_MODEL="c").stdout.splitlines()
    assert out[0] == "1"  # two models, one warning: the reason is the machine's
    assert "integrator='auto' runs scipy's LSODA here" in out[1] and "no-such-cc" in out[1]


def test_sklode_info_prints_it(capsys):
    from sklode.cli import main

    assert main(["info"]) == 0
    assert "integrator='auto': " in capsys.readouterr().out


def test_the_package_cvodes_comes_first_and_sundials_dir_wins():
    import pytest

    from sklode.models._native import BUNDLED

    if not (BUNDLED / "VERSION").is_file():
        pytest.skip("this install did not build CVODES into the package")
    code = "from sklode.models._native import sundials_location as s; print(s())"
    # the install's own build, found without any environment variable
    assert str(BUNDLED) in _run(code).stdout
    # a SUNDIALS asked for by name is used instead (here the system's, where there is one)
    from pathlib import Path

    if not Path("/usr/include/cvodes/cvodes.h").is_file():
        pytest.skip("no system SUNDIALS here to ask for")
    assert _run(code, SUNDIALS_DIR="/usr").stdout.startswith("/usr (SUNDIALS ")
