import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

torch.set_default_dtype(torch.float64)
if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n 2: one core each, no oversubscription
    torch.set_num_threads(1)

# The hand-written scipy baselines live with the benchmarks, outside the library.
# appended, not prepended: benchmarks/petab.py must not hide the petab package
sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def school_flu_model():
    """The user-written model of tests/school_flu_model.py for the 1978 school outbreak."""
    from school_flu_model import SICR

    return SICR()
