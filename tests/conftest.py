import os
import sys
from pathlib import Path

# pytest -n 2: one core per worker, no oversubscription. BLAS (numpy's and scipy's OpenBLAS,
# each two threads by default on two cores) read these when first loaded, which is below for
# numpy; threadpoolctl then limits whatever was loaded before (a plugin's import). Measured on
# the two-core machine, same tests: 347 s with two BLAS threads per worker, 249 s with one.
_WORKER = bool(os.environ.get("PYTEST_XDIST_WORKER"))
if _WORKER:
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import scipy.linalg  # noqa: E402, F401 -- loads scipy's own BLAS before the limit below
import torch  # noqa: E402

torch.set_default_dtype(torch.float64)
if _WORKER:
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)

# The hand-written scipy baselines live with the benchmarks, outside the library.
# appended, not prepended: benchmarks/petab.py must not hide the petab package
sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def school_flu_model():
    """The user-written model of the README's ``sklode fit`` example (docs/data/sir.py) for
    the 1978 school outbreak."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "docs" / "data" / "sir.py"
    spec = importlib.util.spec_from_file_location("sir", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SICR()
