"""The derivatives of a model's vector field, from its one ``rhs`` by torch's autodiff (or its
compiled program where there is one): ``df/dx`` dense, by its sparsity pattern and coloured,
the curvature ``sum_i w_i d2f_i/dx2``, ``df/dtheta`` and vector-Jacobian products. The
:class:`~sklode.ODEModel` methods of the same names call these; the sparsity pattern is kept
with the model's other derived forms."""

from __future__ import annotations

import numpy as np
import torch

from ..exceptions import ModelError
from ._derived import derived
from ._tensors import _DTYPE, _as_tensor, _time_tensor, sum_by_index

# jac_x replicates the batch once per state up to this many states (one backward pass);
# beyond it, one backward pass per state is cheaper (measured on Lorenz-96, d = 40).
_REPLICATE_MAX_STATES = 12



# jac_theta loops the compiled pointwise Jacobian over the points up to this many states
# (measured on 150 points: SEIRD 2.1 ms against torch's 2.5, Lorenz-96 with 10 states 4.7
# against 0.9); beyond it torch's vmap is faster.
_POINTWISE_MAX_STATES = 8



# From this many states, df/dtheta of models with fewer parameters than states is taken in
# forward mode (one product per parameter on the whole grid).
_FORWARD_MODE_MIN_STATES = 64


def jac_x(model, t, x, theta):
    """:meth:`ODEModel.jac_x` (its documentation is there)."""
    grid = model._pointwise().grid
    if grid is not None:  # the compiled program on the whole grid
        with np.errstate(all="ignore"):
            return grid[1](t, np.asarray(x, dtype=np.float64),
                           np.asarray(theta, dtype=np.float64))
    # For few states, one backward pass through a batch replicated once per output
    # component; for many, one backward pass per component. Measured faster than forward
    # mode, whose dual-tensor overhead is large for small element-wise models.
    x = _as_tensor(x)
    theta = _as_tensor(theta)
    n = x.shape[-1]
    if n <= _REPLICATE_MAX_STATES:
        xb = x.unsqueeze(0).expand((n,) + x.shape).clone().requires_grad_(True)
        t_b = _time_tensor(t, x.shape[:-1])
        with torch.enable_grad():
            out = model.rhs(t_b, xb, theta)
            selector = torch.eye(n, dtype=_DTYPE).reshape((n,) + (1,) * (x.dim() - 1) + (n,))
            (grad,) = torch.autograd.grad(out, xb, grad_outputs=selector.expand_as(out))
        return grad.movedim(0, -2).numpy()
    xr = x.clone().requires_grad_(True)
    with torch.enable_grad():
        out = model._call(t, xr, theta)
        rows = [torch.autograd.grad(out[..., i].sum(), xr, retain_graph=i < n - 1)[0]
                for i in range(n)]
    return torch.stack(rows, dim=-2).numpy()


def jac_x_sparsity(model, t=None, x=None, theta=None):
    """:meth:`ODEModel.jac_x_sparsity` (its documentation is there)."""
    cached = derived(model).sparsity
    if cached is None:
        rng = np.random.default_rng(0)
        n = model.n_states
        points = np.vstack([rng.uniform(-2.0, 2.0, (2, n)), rng.uniform(0.5, 2.0, (2, n))])
        theta_random = rng.uniform(0.5, 2.0, model.n_params)
        with np.errstate(all="ignore"):
            J = model.jac_x(0.5, points, theta_random)
        pattern = np.any(J != 0, axis=0)  # NaN counts as non-zero
        if x is not None:
            pattern |= _pattern_at(model, t, x, theta)
        cached = _store_sparsity(model, pattern)
    return cached[0], cached[1]


def jac_x_sparse(model, t, x, theta):
    """:meth:`ODEModel.jac_x_sparse` (its documentation is there)."""
    x = np.asarray(x, dtype=np.float64)
    model.jac_x_sparsity(t, x, theta)
    for attempt in range(4):  # each widening adds what up to 64 disagreeing points show
        rows, cols, colour, pattern = derived(model).sparsity
        values = np.empty(x.shape[:-1] + (rows.size,))
        for k in range(colour.max() + 1 if colour.size else 0):
            v = np.zeros_like(x)
            v[..., colour == k] = 1.0
            vx, _ = model.vjp(t, x, theta, v)
            chosen = colour[rows] == k
            values[..., chosen] = vx[..., cols[chosen]]
        weights = np.random.default_rng(1).standard_normal(x.shape)
        vx, _ = model.vjp(t, x, theta, weights)
        terms = weights.reshape(-1, x.shape[-1])[:, rows] * values.reshape(-1, rows.size)
        sparse_vx = sum_by_index(terms, cols, x.shape[-1])
        magnitude = sum_by_index(np.abs(terms), cols, x.shape[-1])  # round-off's scale
        with np.errstate(invalid="ignore"):
            wrong = np.abs(sparse_vx - vx.reshape(sparse_vx.shape)) > 1e-9 * (
                magnitude + np.abs(vx.reshape(sparse_vx.shape)) + 1e-300)
        wrong &= np.isfinite(vx.reshape(sparse_vx.shape))
        bad_points = np.flatnonzero(np.any(wrong, axis=1))
        if bad_points.size == 0:
            return rows, cols, values
        if attempt == 3:
            break
        flat = x.reshape(-1, x.shape[-1])
        times = np.broadcast_to(np.asarray(t, dtype=np.float64), x.shape[:-1]).reshape(-1)
        _store_sparsity(model, pattern | _pattern_at(model, times, flat, theta,
                                                        rows=bad_points[:64]))
    raise ModelError(
        f"The sparsity of df/dx of {model!r} keeps growing: entries that vanish where they "
        "were probed appear at other points (three widenings did not find them all), so "
        "its structural entries cannot be read reliably. Report the model; the dense "
        "jac_x is exact.")


def curvature_x(model, t, x, theta, weights):
    """:meth:`ODEModel.curvature_x` (its documentation is there)."""
    # Not nested forward mode (torch.func.jvp twice): measured 12x slower, it falls back
    # to Python reference kernels.
    x = _as_tensor(x)
    theta = _as_tensor(theta)
    weights = np.asarray(weights, dtype=np.float64)
    n = x.shape[-1]
    if n >= _FORWARD_MODE_MIN_STATES:  # the batch replicated n times would hold n^2 x
        return _curvature_x_coloured(model, t, x, theta, weights)
    # selector[i, ..., k] = delta_ik: picks output i in copy i of the batch.
    selector = torch.eye(n, dtype=_DTYPE).reshape((n,) + (1,) * (x.dim() - 1) + (n,))
    xb = x.unsqueeze(0).expand((n,) + x.shape).clone().requires_grad_(True)
    out = torch.zeros_like(x)
    with torch.enable_grad():
        f = model.rhs(_time_tensor(t, x.shape[:-1]), xb, theta)
        # grad[i, ..., :] = d f_i / dx
        (grad,) = torch.autograd.grad(f, xb, grad_outputs=selector.expand_as(f),
                                      create_graph=True)
        if not grad.requires_grad:  # f is affine in x: no second derivative anywhere
            return out.numpy()
        for state in np.flatnonzero(weights):
            (second,) = torch.autograd.grad(grad[..., state].sum(), xb, retain_graph=True,
                                            allow_unused=True)
            if second is not None:  # None: this slope does not depend on x
                out = out + float(weights[state]) * second[..., state].movedim(0, -1)
    return out.detach().numpy()


def jac_theta(model, t, x, theta):
    """:meth:`ODEModel.jac_theta` (its documentation is there)."""
    grid = model._pointwise().grid
    if grid is not None:  # the compiled program on the whole grid
        with np.errstate(all="ignore"):  # torch's inf/nan, silently as torch does
            return grid[2](t, np.asarray(x, dtype=np.float64),
                           np.asarray(theta, dtype=np.float64))
    pointwise = (model._pointwise().jacobian_theta
                 if model.n_states <= _POINTWISE_MAX_STATES else None)
    if pointwise is not None:  # the compiled Jacobian, point by point
        x = np.asarray(x, dtype=np.float64)
        theta = np.asarray(theta, dtype=np.float64)
        flat = x.reshape(-1, x.shape[-1])
        times = np.broadcast_to(np.asarray(t, dtype=np.float64), x.shape[:-1]).reshape(-1)
        try:
            J = np.array([pointwise(ti, xi, theta) for ti, xi in zip(times, flat)])
            return J.reshape(x.shape[:-1] + (model.n_states, model.n_params))
        except (ArithmeticError, ValueError):
            pass  # math's domain errors at some point: torch's nan there
    x = _as_tensor(x)
    theta = _as_tensor(theta)
    if x.shape[-1] >= _FORWARD_MODE_MIN_STATES and theta.shape[0] < x.shape[-1]:
        # Many states, fewer parameters: one forward-mode product per parameter on the
        # whole grid; vmap of reverse mode would hold n_points * n_states^2 numbers
        # (Lorenz-96 at 200 states: 11 s and 3 GB per call).
        return _jac_theta_forward(model, t, x, theta)
    batch = x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1])
    t_flat = _time_tensor(t, batch).reshape(-1) if np.ndim(t) else _time_tensor(t, ())

    def one_point(xi, ti):
        return torch.func.jacrev(lambda th: model.rhs(ti, xi, th))(theta)

    try:
        if t_flat.dim():
            J = torch.func.vmap(one_point)(flat, t_flat)
        else:
            J = torch.func.vmap(lambda xi: one_point(xi, t_flat))(flat)
    except (RuntimeError, ValueError, TypeError):
        # rhs with data-dependent Python control flow defeats vmap: forward mode per param.
        return _jac_theta_forward(model, t, x, theta)
    return J.reshape(batch + J.shape[-2:]).detach().numpy()


def vjp(model, t, x, theta, v):
    """:meth:`ODEModel.vjp` (its documentation is there)."""
    # Plain autograd: half the overhead of torch.func.vjp for these small graphs.
    x = _as_tensor(x).clone().requires_grad_(True)
    theta = _as_tensor(theta).clone().requires_grad_(True)
    with torch.enable_grad():
        out = model._call(t, x, theta)
        vx, vtheta = torch.autograd.grad(out, (x, theta), grad_outputs=_as_tensor(v),
                                         allow_unused=True)
    vx = torch.zeros_like(x) if vx is None else vx
    vtheta = torch.zeros_like(theta) if vtheta is None else vtheta
    return vx.detach().numpy(), vtheta.detach().numpy()


def _pattern_at(model, t, x, theta, rows=None):
    """Non-zero pattern of ``jac_x`` at a few rows of a grid (all of ``rows`` if given)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1, model.n_states)
    times = np.broadcast_to(np.asarray(0.0 if t is None else t, dtype=np.float64),
                            x.shape[:1])
    if rows is None:
        rows = np.unique([0, x.shape[0] // 2, x.shape[0] - 1])
    with np.errstate(all="ignore"):
        J = model.jac_x(times[rows], x[rows], theta)
    return np.any(J != 0, axis=0)


def _store_sparsity(model, pattern):
    rows, cols = np.nonzero(pattern)
    # Greedy colouring of the rows: rows of one colour share no column, so one
    # vector-Jacobian product with the sum of their unit vectors reads all of their
    # entries (Lorenz-96: 4 entries per row, 4 to 7 colours whatever the dimension).
    by_column = [[] for _ in range(pattern.shape[1])]
    for r, c in zip(rows, cols):
        by_column[c].append(r)
    colour = np.full(pattern.shape[0], -1)
    for r in range(pattern.shape[0]):
        taken = {colour[q] for c in np.flatnonzero(pattern[r]) for q in by_column[c]}
        colour[r] = next(k for k in range(len(taken) + 1) if k not in taken)
    cached = (rows, cols, colour, pattern)
    derived(model).sparsity = cached
    return cached


def _curvature_x_coloured(model, t, x, theta, weights):
    """:meth:`curvature_x` by Hessian-vector products on the sparsity pattern.

    For a colour ``R`` of the rows (rows sharing no state, :meth:`jac_x_sparsity`),
    ``s = sum_{a in R} f_a`` has a block-diagonal Hessian (one block per row: the states
    that row reads), so its product with the indicator of the p-th state of every row
    of ``R`` reads ``d^2 f_a / dx_l^2`` for exactly those pairs: colours times the most
    states a row reads products (Lorenz-96: 4 x 4), each a second reverse pass over the
    whole grid, in ``n_points * n_states`` memory.
    """
    rows, cols = model.jac_x_sparsity()
    colour = derived(model).sparsity[2]
    n = x.shape[-1]
    starts = np.searchsorted(rows, np.arange(n + 1))
    out = np.zeros(tuple(x.shape))
    xr = x.clone().requires_grad_(True)
    with torch.enable_grad():
        f = model._call(t, xr, theta)
        for k in range(colour.max() + 1 if colour.size else 0):
            members = np.flatnonzero(colour == k)
            picker = torch.zeros(n, dtype=_DTYPE)
            picker[members] = 1.0
            (grad,) = torch.autograd.grad((f * picker).sum(), xr, create_graph=True)
            if not grad.requires_grad:  # f is affine in x: no second derivative
                return out
            width = int(np.max(starts[members + 1] - starts[members], initial=0))
            for position in range(width):
                owner = [(a, cols[starts[a] + position]) for a in members
                         if starts[a] + position < starts[a + 1]]
                owner = [(a, l) for a, l in owner if weights[l] != 0]  # noqa: E741
                if not owner:
                    continue
                direction = torch.zeros(n, dtype=_DTYPE)
                direction[[state for _, state in owner]] = 1.0
                (second,) = torch.autograd.grad((grad * direction).sum(), xr,
                                                retain_graph=True, allow_unused=True)
                if second is None:
                    continue
                second = second.detach().numpy()
                for a, l in owner:  # noqa: E741
                    out[..., a] += weights[l] * second[..., l]
    return out


def _jac_theta_forward(model, t, x, theta):
    """``df/dtheta`` by one forward-mode product per parameter on the whole grid."""
    import warnings

    basis = torch.eye(theta.shape[0], dtype=_DTYPE)
    with warnings.catch_warnings():  # torch's forward mode loads decompositions through
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit on first use
        cols = [torch.func.jvp(lambda th: model._call(t, x, th), (theta,), (e,))[1]
                for e in basis]
    if not cols:
        return np.zeros(tuple(x.shape) + (0,))
    return torch.stack(cols, dim=-1).detach().numpy()
