"""Is a model's field affine in its parameters, ``f = f0(x) + F1(x) theta``? Detected
numerically, once per fit; the split gives WENDy its regression matrix and BCD-prox its exact
closed-form theta-step."""

from __future__ import annotations

import numpy as np

from ..exceptions import NotLinearInThetaError

def is_linear_in_theta(model, t=None, x=None, rtol=1e-9):
    """:meth:`ODEModel.is_linear_in_theta` (its documentation is there)."""
    return bool(_linearity_probe(model, t, x)[2] <= rtol)


def affine_split(model, t, x, rtol=1e-9, check=True):
    """:meth:`ODEModel.affine_split` (its documentation is there)."""
    if not check:
        x = np.asarray(x, dtype=np.float64)
        f0 = model.f(t, x, np.zeros(model.n_params))
        F1 = np.stack([model.f(t, x, e) - f0 for e in np.eye(model.n_params)], axis=-1)
        return f0, F1
    f0, F1, defect = _linearity_probe(model, t, x)
    if defect > rtol:
        raise NotLinearInThetaError(
            f"{model!r} is not linear in its parameters {model.param_names}: f(theta) "
            f"differs from f0 + F1 @ theta by {defect:.2e} (relative). Methods that need "
            "the affine split (WENDy's linear path, BCD-prox's closed-form theta-step) "
            "must use their nonlinear path for this model."
        )
    return f0, F1


def _linearity_probe(model, t=None, x=None, random_state=0):
    """Affine split by ``n_params + 1`` evaluations, and its misfit at random parameters.

    ``f0 = f(theta=0)`` and ``F1[..., k] = f(e_k) - f0`` are exact when ``f`` is affine in
    ``theta``; the returned defect is the relative misfit of ``f0 + F1 @ theta`` against
    ``f(theta)`` at two random parameter vectors (zero up to rounding for affine models,
    O(1) otherwise, infinite when ``f`` is not even finite at ``theta = 0``).
    """
    rng = np.random.default_rng(random_state)
    if x is None:
        x = rng.standard_normal((7, model.n_states))
        t = rng.uniform(0.0, 1.0, 7)
    elif t is None:
        t = 0.0
    x = np.asarray(x, dtype=np.float64)
    p = model.n_params
    with np.errstate(all="ignore"):
        f0 = model.f(t, x, np.zeros(p))
        F1 = np.stack([model.f(t, x, e) - f0 for e in np.eye(p)], axis=-1)
        scale = np.abs(model.theta_guess()) + 1.0
        defect = 0.0
        for _ in range(2):
            theta = model.theta_guess() + 0.5 * scale * rng.standard_normal(p)
            exact = model.f(t, x, theta)
            size = max(float(np.max(np.abs(exact))), float(np.max(np.abs(F1))), 1e-300)
            misfit = float(np.max(np.abs(f0 + F1 @ theta - exact))) / size
            defect = misfit if not np.isfinite(misfit) else max(defect, misfit)
            if not np.isfinite(defect):
                break
    if not np.isfinite(defect):  # e.g. f(theta=0) divides by zero: not affine
        defect = np.inf
    return f0, F1, defect
