""":func:`check_model`: is a user's model one sklode can fit? Its names, signature, shapes,
observation and noise models, and whether torch can differentiate its ``rhs``, checked once per
model with messages that say what to change."""

from __future__ import annotations


import numpy as np
import torch

from ..exceptions import ModelError
from ._base import ODEModel
from ._derived import derived
from ._tensors import _DTYPE, _as_tensor, _time_tensor

__all__ = ["check_model"]


def check_model(model):
    """Validate a model's names and its ``rhs`` once; raise :class:`ModelError` naming the fault.

    Checks that it is an :class:`ODEModel`, that the names are non-empty tuples of distinct
    strings, that ``default_theta`` has one entry per parameter, and that ``rhs`` returns a
    float64 tensor of the shape of ``x`` for a single point and a batch of points, with each
    batch row equal to the single-point result.

    Parameters
    ----------
    model : ODEModel
        The model to check.

    Returns
    -------
    model : ODEModel
        The same object, for chaining.
    """
    if not isinstance(model, ODEModel):
        raise ModelError(
            f"model must be an sklode.ODEModel instance, got {type(model).__name__}. "
            "Subclass ODEModel (state_names, param_names, rhs) or use FunctionModel."
        )
    # once per model: the checks (an autograd-against-differences comparison among them)
    # cost ~9 ms, more than a forward solve; the signature changes when anything the checks
    # read does (a constant, a name, a method assigned on the instance)
    signature = _check_signature(model)
    if signature is not None and derived(model).checked_signature == signature:
        return model
    name = type(model).__name__
    for attr in ("state_names", "param_names"):
        names = getattr(model, attr)
        if (
            not isinstance(names, tuple)
            or len(names) == 0
            or not all(isinstance(s, str) for s in names)
        ):
            raise ModelError(f"{name}.{attr} must be a non-empty tuple of str, got {names!r}.")
        if len(set(names)) != len(names):
            raise ModelError(f"{name}.{attr} has repeated names: {names!r}.")
    if model.default_theta is not None and len(model.default_theta) != model.n_params:
        raise ModelError(
            f"{name}.default_theta has {len(model.default_theta)} entries but "
            f"param_names has {model.n_params}: {model.param_names!r}."
        )
    theta = _as_tensor(model.theta_guess())
    rng = np.random.default_rng(0)
    batch = _as_tensor(rng.uniform(0.5, 1.5, (3, model.n_states)))
    with torch.no_grad():
        try:
            out = model.rhs(_time_tensor([0.0, 0.5, 1.0], (3,)), batch, theta)
            single = model.rhs(_time_tensor(0.5, ()), batch[1], theta)
        except Exception as exc:  # the user's code failed: say whose and where
            hint = (f" {_TORCH_ONLY}" if "Python scalars" in str(exc) or "numpy" in str(exc)
                    else "")
            raise ModelError(
                f"{name}.rhs raised {type(exc).__name__}: {exc} when called with x of shape "
                f"(3, {model.n_states}) and theta of shape ({model.n_params},).{hint}"
            ) from exc
    for label, value, shape in (("a batch", out, (3, model.n_states)),
                                ("one point", single, (model.n_states,))):
        if not isinstance(value, torch.Tensor):
            raise ModelError(
                f"{name}.rhs must return a torch.Tensor, got {type(value).__name__} for "
                f"{label}. Build the result with torch.stack([...], dim=-1)."
            )
        if tuple(value.shape) != shape:
            raise ModelError(
                f"{name}.rhs returned shape {tuple(value.shape)} for {label} x of shape "
                f"{shape}; expected {shape}, one derivative per state in "
                f"state_names={model.state_names!r}. Stack the derivatives on the last axis."
            )
        if value.dtype != _DTYPE:
            raise ModelError(
                f"{name}.rhs returned dtype {value.dtype}; expected torch.float64. Do not "
                "create tensors with a fixed dtype inside rhs (use x.new_tensor or plain "
                "Python numbers)."
            )
    # rtol 1e-9, not 1e-12: torch's vectorised pow/exp of a batch and its scalar path for one
    # point may differ by an ulp of a large intermediate; wrong indexing differs by O(1)
    if not torch.allclose(out[1], single, rtol=1e-9, atol=1e-12, equal_nan=True):
        raise ModelError(
            f"{name}.rhs gives a different result for a point inside a batch than for the "
            "same point alone: it must index states with x[..., i] and treat leading axes "
            "as independent time points."
        )
    if getattr(model, "check_derivatives", True):
        _check_differentiable(model, name, batch, theta)
    _check_observation_model(model, name, batch, theta)
    if signature is not None:
        derived(model).checked_signature = signature
    return model



def _check_signature(model):
    """What :func:`check_model` reads, as a comparable tuple (None: cannot be summarised,
    check every time)."""
    try:
        default = (None if model.default_theta is None
                   else tuple(np.ravel(np.asarray(model.default_theta, dtype=float)).tolist()))
        own = tuple(None if model.__dict__.get(n) is None else id(model.__dict__[n])
                    for n in ("rhs", "observe", "noise_sd"))
        # functions among the constants (FunctionModel's rhs) by identity: their repr is a
        # name, which another function may share
        own += tuple(id(v) for v in model.get_constants().values() if callable(v))
        return (type(model), repr(model), model.state_names, model.param_names, default,
                model.observable_names, own, getattr(model, "check_derivatives", True))
    except Exception:  # an exotic model (a constant whose repr fails): check every call
        return None



def _check_observation_model(model, name, batch, theta):
    """``observe`` and ``noise_sd``: names, shapes and batching, as for ``rhs``."""
    names = model.observable_names
    if names is not None:
        if (not isinstance(names, tuple) or not names
                or not all(isinstance(s, str) for s in names) or len(set(names)) != len(names)):
            raise ModelError(f"{name}.observable_names must be a non-empty tuple of distinct "
                             f"str, got {names!r}.")
        if type(model).observe is ODEModel.observe:
            raise ModelError(f"{name} declares observable_names={names!r} but no observe(t, x, "
                             "theta): define observe to say how the states are read.")
    elif type(model).observe is not ODEModel.observe:
        raise ModelError(f"{name} defines observe(t, x, theta) but no observable_names: "
                         "declare observable_names, one name per column observe returns.")
    if model.noise_sd is not None and not callable(model.noise_sd):
        raise ModelError(f"{name}.noise_sd must be a method noise_sd(self, t, y, theta), got "
                         f"{type(model.noise_sd).__name__}.")
    n_obs = model.n_observables
    checks = [("observe", lambda t, x: model.observe(t, x, theta))] if names else []
    if model.noise_sd is not None:
        checks.append(("noise_sd", lambda t, x: model.noise_sd(
            t, model.observe(t, x, theta) if names else x, theta)))
    for method, call in checks:
        with torch.no_grad():
            try:
                out = call(_time_tensor([0.0, 0.5, 1.0], (3,)), batch)
                single = call(_time_tensor(0.5, ()), batch[1])
            except Exception as exc:
                raise ModelError(f"{name}.{method} raised {type(exc).__name__}: {exc} when "
                                 f"called on a batch of 3 states.") from exc
        for label, value, shape in (("a batch", out, (3, n_obs)),
                                    ("one point", single, (n_obs,))):
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
                got = (tuple(value.shape) if isinstance(value, torch.Tensor)
                       else type(value).__name__)
                raise ModelError(
                    f"{name}.{method} returned {got} for {label}; expected a float64 tensor of "
                    f"shape {shape}, one value per observable {model.observables!r} (use "
                    "x[..., i:i+1] slices and torch.stack or torch.cat on the last axis).")
        if out.dtype != _DTYPE:
            raise ModelError(f"{name}.{method} returned dtype {out.dtype}; expected "
                             "torch.float64.")
        if not torch.allclose(out[1], single, rtol=1e-12, atol=1e-12, equal_nan=True):
            raise ModelError(f"{name}.{method} gives a different result for a point inside a "
                             "batch than alone: treat leading axes as independent points.")



# How many states the derivative check of check_model perturbs (each costs two rhs calls).
_CHECKED_STATES = 20



_TORCH_ONLY = ("Write rhs with torch operations on its tensors (torch.sin, torch.exp, "
               "torch.where, ...), not numpy or math functions, which cut the derivatives "
               "every method takes of it.")



def _check_differentiable(model, name, batch, theta):
    """Every method differentiates ``rhs`` (Jacobians, vector-Jacobian products): a field
    computed through numpy or ``math`` passes a plain call but fails, or silently loses its
    derivatives, under autograd. ``float(theta[0])`` even runs, with a derivative of zero
    in that parameter: autograd is compared with central differences of the same field."""
    t = _time_tensor([0.0, 0.5, 1.0], (3,))
    x = batch.clone().requires_grad_(True)
    th = theta.clone().requires_grad_(True)
    weights = _as_tensor(np.random.default_rng(1).uniform(0.5, 1.5, tuple(batch.shape)))
    try:
        with torch.enable_grad():  # also when a caller runs under torch.no_grad()
            out = model.rhs(t, x, th)
            if not out.requires_grad:
                raise ModelError(f"{name}.rhs returns a tensor that depends on neither x "
                                 "nor theta for autograd (it was rebuilt from numpy values "
                                 f"or detached). {_TORCH_ONLY}")
            grad_x, grad_theta = torch.autograd.grad((weights * out).sum(), (x, th),
                                                     allow_unused=True)
    except ModelError:
        raise
    except Exception as exc:  # the user's code failed under autograd: say what to change
        raise ModelError(f"{name}.rhs cannot be differentiated: {type(exc).__name__}: "
                         f"{str(exc).rstrip('.')}. {_TORCH_ONLY}") from exc
    grad_x = torch.zeros_like(batch) if grad_x is None else grad_x
    grad_theta = torch.zeros_like(theta) if grad_theta is None else grad_theta

    def weighted(xv, thv):
        with torch.no_grad():
            return float((weights * model.rhs(t, xv, thv)).sum())

    level = abs(weighted(batch, theta))
    # Directions of size h: each parameter, and each of up to _CHECKED_STATES states moved at
    # all three points; autograd's derivative along each against the central difference.
    directions = []
    for k, label in enumerate(model.param_names):
        step = torch.zeros_like(theta)
        step[k] = 1e-6 * max(1.0, abs(float(theta[k])))
        directions.append(("parameter", label, torch.zeros_like(batch), step))
    for k in range(min(model.n_states, _CHECKED_STATES)):
        step = torch.zeros_like(batch)
        step[:, k] = 1e-6 * max(1.0, float(batch[:, k].abs().max()))
        directions.append(("state", model.state_names[k], step, torch.zeros_like(theta)))
    for kind, label, dx, dtheta in directions:
        h = float(dx.abs().max() + dtheta.abs().max())
        fd = (weighted(batch + dx, theta + dtheta) - weighted(batch - dx, theta - dtheta)) / (
            2 * h)
        ad = float((grad_x * dx).sum() + (grad_theta * dtheta).sum()) / h
        if abs(ad - fd) > 1e-3 * (abs(ad) + abs(fd)) + 1e-7 * (1.0 + level):
            raise ModelError(
                f"{name}.rhs changes with the {kind} {label!r} (central difference "
                f"{fd:.4g}) but its autograd derivative in it is {ad:.4g}: a float(), "
                f".item(), numpy or math call, or a detach, cut the derivative. "
                f"{_TORCH_ONLY}")
