"""Check an installed sklode solves with the CVODES built into it, compiling nothing.

Run by ``.ci/without_system_sundials`` on the wheel ``pip wheel .`` builds (installed in a
fresh venv, the C compiler hidden) and by cibuildwheel's ``test-command`` on every wheel it
builds: ``integrator="auto"`` must be CVODES through the package's precompiled solver, a fit
must land near the truth, and the build cache must stay empty.

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
    assert not (cache / "native").exists(), "a model was compiled"
    print(f"sklode {sklode.__version__} from {Path(sklode.__file__).parent}: CVODES through "
          f"{solver.library}, theta {np.round(est.theta_, 3)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
