"""The install-time step pyproject.toml cannot state: SUNDIALS' CVODES built into the package
(build_tools/bundle_cvodes.py), so that ``pip install`` alone gives ``integrator="auto"``
CVODES, with no system library to install first."""

import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

sys.path.insert(0, str(Path(__file__).resolve().parent / "build_tools"))
from bundle_cvodes import bundle  # noqa: E402


class BuildPyWithCVODES(build_py):
    """``build_py``, then CVODES into the package (in the source tree for an editable
    install). A failure (no compiler, no network to the registry) does not fail the
    install: ``integrator="auto"`` then says why, once per process."""

    def run(self):
        super().run()
        root = Path(__file__).resolve().parent if getattr(self, "editable_mode", False) \
            else Path(self.build_lib)
        try:
            bundle(root / "sklode" / "_sundials")
        except Exception as exc:  # noqa: BLE001 - any failure leaves the LSODA fallback
            print(f"sklode: SUNDIALS' CVODES was not built into the package ({exc}); "
                  "integrator='auto' will say so and use LSODA, or set SUNDIALS_DIR.",
                  file=sys.stderr)


class PlatformDistribution(Distribution):
    """The wheel holds a compiled library: tagged for this platform, not ``py3-none-any``."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithCVODES}, distclass=PlatformDistribution)
