"""Check an installed sklode solves with the CVODES built into it, compiling nothing.

Run by ``.ci/without_system_sundials`` on the wheel ``pip wheel .`` builds (installed in a
fresh venv, the C compiler hidden) and by cibuildwheel's ``test-command`` on every wheel it
builds: ``integrator="auto"`` must be CVODES through the package's precompiled solver, a fit
must land near the truth, a network no order makes banded must be factored by the package's
KLU, and the build cache must stay empty.

    python build_tools/check_wheel.py
"""

import os
import sys
import tempfile
from pathlib import Path

import numpy as np


def main():
    cache = Path(tempfile.mkdtemp())
    os.environ["SKLODE_CACHE_DIR"] = str(cache)  # before sklode reads it
    os.environ.pop("SKLODE_CVODES_MODEL", None)
    os.environ.pop("SUNDIALS_DIR", None)
    import sklode
    from sklode import AdjointODE
    from sklode.datasets import make_trajectory
    from sklode.integrate import integrator_for
    from sklode.models import LotkaVolterra

    model = LotkaVolterra()
    solver = model.native_solver()
    assert integrator_for(model, "auto") == "CVODES", model.native_unavailable_reason()
    assert solver.route == "tape", solver.route
    data = make_trajectory("lotka_volterra", noise=0.05, random_state=0)
    est = AdjointODE(LotkaVolterra(), theta0=(2.5, 1.5, 4.5, 1.5)).fit(data.t, data.Y)
    # noise 0.05 on Lotka-Volterra's trajectory: within 0.25 of the truth (measured 0.105)
    assert np.abs(est.theta_ - [2, 1, 4, 1]).max() < 0.25, est.theta_
    # a network no order makes banded: factored by the KLU built into the package
    # (the repository's tests/network_models.py: the source tree is beside the wheel here)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from network_models import Hub

    network = Hub(80)
    sparse = network.native_solver()
    assert sparse is not None and sparse.sparse, network.native_unavailable_reason()
    x0 = np.linspace(0.1, 0.9, network.n_states)
    times = np.linspace(0.1, 2.0, 5)
    on_klu = sklode.simulate(network, network.default_theta, x0, times, t0=0.0)
    on_lsoda = sklode.simulate(network, network.default_theta, x0, times, t0=0.0,
                               integrator="LSODA")
    # both at rtol 1e-8: measured 1.5e-7 of the largest state apart (LSODA's global error)
    assert np.abs(on_klu - on_lsoda).max() < 1e-6 * np.abs(on_lsoda).max()
    assert not (cache / "native").exists(), "a model was compiled"
    print(f"sklode {sklode.__version__} from {Path(sklode.__file__).parent}: CVODES through "
          f"{solver.library}, theta {np.round(est.theta_, 3)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
