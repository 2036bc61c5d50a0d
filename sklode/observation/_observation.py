"""The observation model of one experiment (:class:`Observation`): predicted observables and
their noise at the data's times, residual rows whose squares sum to ``-log L`` less a constant,
their derivatives for the Gauss-Newton and adjoint passes, and ``-log L`` itself. Per-column
behaviour comes from each column's noise distribution (:mod:`._noise`)."""

from __future__ import annotations

import warnings

import numpy as np
import torch

from ..exceptions import IntegrationError
from ..models._compile import compile_grid, parameters_read
from ..models._derived import derived
from ._noise import distribution_of, neg_log_likelihood_terms

__all__ = ["NOISE_RANGE_WITHOUT_FLOOR", "Observation"]

# Laplace rows sign(e) sqrt(2 |e| / s) have an infinite slope at e = 0; below this fraction of
# s they are e / sqrt(floor * s^2 / 2) instead: the cost changes by < 1e-8 per observation.
_LAPLACE_FLOOR = 1e-8



# Noise rows sqrt(2 log s + C): C lets s fall this far below the data's typical size before
# the row is undefined (the trial point is then rejected).
_NOISE_RANGE = 1e8



# The range for an optimiser that reads the cost less its constant (Fides, through
# cost_offset): no noise level a parameter box allows is cut off (a PEtab start with two noise
# factors of 1e-5 has s ~ 1e-10), and the noise rows' part of the Gauss-Newton matrix vanishes
# as in AMICI's Fisher information (its C -> infinity limit, found the better on Fides' fits).
NOISE_RANGE_WITHOUT_FLOOR = 1e150



class Observation:
    """One experiment's observation and noise model: from the states at its observation
    times to its likelihood, its residual rows and their derivatives.

    Parameters
    ----------
    model : ODEModel
        Reads the data through ``observe`` (or its states) and ``noise_sd`` when it has them.
    columns : tuple of int
        Which observables (the model's ``observables``) the data's columns hold.
    t : ndarray of shape (n_times,)
        Observation times.
    Y : ndarray of shape (n_times, n_columns)
        Observations, NaN where missing; positive where a log kind reads them.
    kinds : tuple of str
        One noise kind per column.
    sigma : ndarray of shape (n_times, n_columns) or None
        Known standard deviations (:func:`known_sigma`); None when the model's ``noise_sd``
        gives them.
    noise_range : float, default=1e8
        The noise rows ``sqrt(2 log s + C)`` are defined down to ``s`` = a column's typical
        data size over ``noise_range``; a point with a smaller ``s`` cannot be evaluated
        (an optimiser rejects it). A larger range also shrinks those rows' part of the
        Gauss-Newton matrix, ``(d log s)^2 / (2 log s + C)``, and adds to the cost's
        constant (:meth:`cost_offset`), which loosens a stopping test relative to the cost.
    """

    def __init__(self, model, columns, t, Y, kinds, sigma, noise_range=_NOISE_RANGE):
        self.model, self.columns, self.kinds = model, tuple(columns), tuple(kinds)
        self.t = np.asarray(t, dtype=np.float64)
        self.Y = np.asarray(Y, dtype=np.float64)
        self.mask = np.isfinite(self.Y)
        self.modelled_noise = model.has_noise_model
        if not self.modelled_noise and sigma is None:
            raise ValueError("The observation needs sigma when the model has no noise_sd.")
        for j, kind in enumerate(self.kinds):
            values = self.Y[self.mask[:, j], j]
            if distribution_of(kind).on_log_scale and np.any(values <= 0):
                name = model.observables[self.columns[j]]
                raise ValueError(
                    f"noise_kind={kind!r} reads {name!r} on the log scale, but its data hold "
                    f"{np.sum(values <= 0)} non-positive value(s) (smallest {values.min():g}): "
                    "set them to NaN (below the detection limit) or use a linear kind such "
                    "as 'absolute'.")
        self.n_times, self.n_columns = self.Y.shape
        self._y = torch.from_numpy(np.where(self.mask, self.Y, 1.0))  # 1: a log-safe filler
        self._mask = torch.from_numpy(self.mask.astype(np.float64))
        self._sigma = None if sigma is None else torch.from_numpy(
            np.where(self.mask, sigma, 1.0).astype(np.float64))
        self._t = torch.from_numpy(self.t.copy())
        dist = [distribution_of(k) for k in self.kinds]
        self._log_base = torch.tensor([d.log_base for d in dist], dtype=torch.float64)
        self._is_log = torch.tensor([d.on_log_scale for d in dist])
        self._is_laplace = torch.tensor([d.rows == "absolute" for d in dist])
        self._log_divisor = torch.where(self._is_log, self._log_base, 1.0)
        # which branches the rows need: torch.where and clamp cost ~1 ms each under
        # forward-mode differentiation (Python decompositions), most problems need neither
        self._any_log, self._all_log = bool(self._is_log.any()), bool(self._is_log.all())
        self._any_laplace = bool(self._is_laplace.any())
        self._y_on_scale = self._on_scale(self._y)  # the data do not move: once
        # C of the noise rows: from the data alone (see the module docstring)
        typical = np.ones(self.n_columns)
        for j, d in enumerate(dist):
            values = np.abs(self.Y[self.mask[:, j], j])
            values = values[values > 0]
            if not d.on_log_scale and values.size:
                typical[j] = np.median(values)
        self._offset = torch.from_numpy(2.0 * np.log(noise_range / typical))
        self._noise_floor = typical / noise_range

    @property
    def n_rows(self):
        """Rows of the residual: the data rows, then one noise row per entry when the noise
        depends on the unknowns."""
        return self.Y.size * (2 if self.modelled_noise else 1)

    @property
    def n_values(self):
        """Observed entries."""
        return int(self.mask.sum())

    @property
    def takes_rows_of_parameters(self):
        """Whether :meth:`residual` and :meth:`jacobians` take one theta per time (shape
        ``(n_times, n_params)``): the compiled observation and noise models, no Laplace
        column (the torch path takes one theta)."""
        return not self._any_laplace and self._compiled_observation() is not None

    @classmethod
    def stacked(cls, observations):
        """The observations of several experiments as one, their times stacked in the order
        given (one theta per time then tells each row's parameters apart).

        Parameters
        ----------
        observations : list of Observation
            Of one model and one noise kind per observable, all with
            :attr:`takes_rows_of_parameters`.

        Returns
        -------
        stacked : Observation
            Over every observable any of them holds; each entry keeps its own data, known
            noise level and noise rows' constant.
        rows : list of ndarray of int
            Where each observation's residual rows are in the stacked residual, in its own
            order.
        """
        first = observations[0]
        columns = sorted({c for o in observations for c in o.columns})
        kinds = {c: k for o in observations for c, k in zip(o.columns, o.kinds)}
        where = {c: j for j, c in enumerate(columns)}
        n_rows, m = sum(o.n_times for o in observations), len(columns)
        Y = np.full((n_rows, m), np.nan)
        sigma = None if first.modelled_noise else np.ones((n_rows, m))
        offset, floor = np.zeros((n_rows, m)), np.ones((n_rows, m))
        rows, start = [], 0
        for o in observations:
            n, cols = o.n_times, np.array([where[c] for c in o.columns])
            block = np.ix_(np.arange(start, start + n), cols)
            Y[block] = o.Y
            if sigma is not None:
                sigma[block] = o._sigma.numpy()
            # the noise rows' constant and floor stay each experiment's own (from its data)
            offset[block] = o._offset.numpy()
            floor[block] = o._noise_floor
            data = ((start + np.arange(n))[:, None] * m + cols[None, :]).ravel()
            rows.append(np.concatenate([data, n_rows * m + data]) if first.modelled_noise
                        else data)
            start += n
        stacked = cls(first.model, columns, np.concatenate([o.t for o in observations]), Y,
                      [kinds[c] for c in columns], sigma)
        stacked._offset = torch.from_numpy(offset)
        stacked._noise_floor = floor
        return stacked, rows

    # ------------------------------------------------------------------ torch rows
    def _predicted(self, t, x, theta, sigma):
        """The data columns' observables ``h`` and standard deviations ``s`` (the model's
        ``noise_sd`` at ``h``, or the known ``sigma``)."""
        everything = (self.model.observe(t, x, theta) if self.model.has_observation_model
                      else x)
        h = everything[..., list(self.columns)]
        if not self.modelled_noise:
            return h, sigma
        return h, self.model.noise_sd(t, everything, theta)[..., list(self.columns)]

    def _on_scale(self, h):
        """``h`` on each column's scale: ``log_b h`` for the log kinds, ``h`` otherwise."""
        if not self._any_log:
            return h
        if self._all_log:  # (the domain check keeps h positive on observed entries)
            return torch.log(torch.clamp(h, min=1e-300)) / self._log_divisor
        safe = torch.where(self._is_log, torch.clamp(h, min=1e-300), h)
        return torch.where(self._is_log, torch.log(safe) / self._log_divisor, h)

    def _rows(self, t, x, theta, y_on_scale, sigma, mask):
        """Residual rows of one time (or a batch): ``(n_columns,)`` data rows, then noise
        rows when modelled; ``y_on_scale`` is the data on each column's scale."""
        h, s = self._predicted(t, x, theta, sigma)
        e = self._on_scale(h) - y_on_scale
        if self._any_laplace:
            floor = _LAPLACE_FLOOR * s
            laplace = e * torch.rsqrt(torch.clamp(torch.abs(e), min=floor) * s / 2.0)
            r = torch.where(self._is_laplace, laplace, e / s) * mask
        else:
            r = e / s * mask
        if not self.modelled_noise:
            return r
        noise = torch.sqrt(torch.clamp(2.0 * torch.log(s) + self._offset, min=0.0)) * mask
        return torch.cat([r, noise], dim=-1)

    def _fisher_rows(self, t, x, theta, y_on_scale, sigma, mask):
        """Rows whose Gram matrix is the expected Fisher information of one time: the
        observable on its scale over its (held) standard deviation, and ``k log s`` with
        ``k = sqrt(2)`` (normal on any scale) or 1 (Laplace) for a modelled noise."""
        h, s = self._predicted(t, x, theta, sigma)
        k = torch.where(self._is_laplace, 1.0, np.sqrt(2.0))
        return torch.cat([self._on_scale(h) / s.detach() * mask, k * torch.log(s) * mask],
                         dim=-1)

    def fisher_jacobians(self, X, theta):
        """As :meth:`jacobians`, for rows whose Gram matrix is the expected Fisher
        information (a modelled noise: the sum-of-squares rows' Gauss-Newton matrix
        understates the noise parameters' information by about half).

        Parameters
        ----------
        X : ndarray of shape (n_times, n_states)
        theta : ndarray of shape (n_params,)

        Returns
        -------
        J_x : ndarray of shape (n_rows, n_states)
        J_theta : ndarray of shape (n_rows, n_params)
        """
        fast = self._numpy_jacobians(X, theta, fisher=True)
        return self._without_missing(fast if fast is not None else self._batched_jacobians(
            self._fisher_rows, X, theta))

    def _check_domain(self, t, X, theta):
        """Predicted observables that a log kind cannot read, or a noise level that is not
        positive, make the point infeasible (trial points there are rejected)."""
        with torch.no_grad():
            h, s = self._predicted(t, X, theta, self._sigma_or_ones())
        self._check_values(h.numpy(), s.numpy())

    def _inputs(self, X, theta):
        X = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64))
        theta = torch.from_numpy(np.asarray(theta, dtype=np.float64).copy())
        self._check_domain(self._t, X, theta)
        return X, theta

    def _numpy_predicted(self, X, theta):
        """``(H, h, s)``: every observable, the data columns' and their standard deviations,
        through the compiled observation and noise models (numpy, no torch call: a PEtab
        problem has dozens of experiments per evaluation); None where they do not compile.
        """
        functions = self._compiled_observation()
        if functions is None:
            return None
        observe, noise = functions
        cols = list(self.columns)
        with np.errstate(all="ignore"):
            H = X if observe is True else observe[0](self.t, X, theta)
            s = (noise[0](self.t, H, theta)[:, cols] if self.modelled_noise
                 else self._sigma_or_ones().numpy())
        return H, H[:, cols], s

    def _check_values(self, h, s):
        """:meth:`_check_domain` on the data columns' predicted observables ``h`` and
        standard deviations ``s`` (numpy, shape ``(n_times, n_columns)``)."""
        observed = self.mask
        is_log = self._is_log.numpy()
        if self._any_log and np.any((h <= 0) & is_log & observed):
            raise IntegrationError(
                "A predicted observable read on the log scale is not positive "
                f"(smallest {float(h[np.broadcast_to(is_log, h.shape) & observed].min()):.3g}"
                "): the log-normal likelihood is undefined there.")
        if self.modelled_noise:
            # 2 log s + C < 0 (the noise row undefined) is s below exp(-C / 2)
            if np.any(observed & (~(s > 0) | (s < self._noise_floor))):
                raise IntegrationError(
                    "The model's noise_sd is not positive (or vanishingly small) at some "
                    "observation: its parameters have left the range where the "
                    "likelihood is defined. Bound them (bounds=, positive=).")

    def _flat(self, rows):
        """``(n_times, k)`` rows into the residual's order: data rows by time, then noise."""
        m = self.n_columns
        if not self.modelled_noise:
            return rows.reshape(-1)
        return np.concatenate([rows[:, :m].reshape(-1), rows[:, m:].reshape(-1)])

    # ------------------------------------------------------------------ numpy interface
    def residual(self, X, theta):
        """The residual rows at the states ``X`` (at the observation times).

        Parameters
        ----------
        X : ndarray of shape (n_times, n_states)
        theta : ndarray of shape (n_params,)

        Returns
        -------
        ndarray of shape (n_rows,)
            Zero for missing entries.
        """
        if not self._any_laplace:
            X = np.asarray(X, dtype=np.float64)
            theta = np.asarray(theta, dtype=np.float64)
            values = self._numpy_predicted(X, theta)
            if values is not None:
                _, h, sd = values
                self._check_values(h, sd)
                return self._flat(self._numpy_rows(h, sd))
        X, theta = self._inputs(X, theta)
        with torch.no_grad():
            rows = self._rows(self._t, X, theta, self._y_on_scale, self._sigma_or_ones(),
                              self._mask)
        return self._flat(rows.numpy())

    def _numpy_rows(self, h, s):
        """:meth:`_rows` (normal kinds) on numpy values."""
        is_log = self._is_log.numpy()
        with np.errstate(all="ignore"):
            on_scale = np.where(is_log, np.log(np.clip(h, 1e-300, None))
                                / self._log_divisor.numpy(), h) if self._any_log else h
            r = np.where(self.mask, (on_scale - self._y_on_scale.numpy()) / s, 0.0)
            if not self.modelled_noise:
                return r
            noise = np.sqrt(np.clip(2.0 * np.log(s) + self._offset.numpy(), 0.0, None))
        return np.concatenate([r, np.where(self.mask, noise, 0.0)], axis=-1)

    def _sigma_or_ones(self):
        return self._sigma if self._sigma is not None else torch.ones_like(self._y)

    def jacobians(self, X, theta):
        """Derivatives of the residual rows in each time's state and in theta.

        Parameters
        ----------
        X : ndarray of shape (n_times, n_states)
        theta : ndarray of shape (n_params,)

        Returns
        -------
        J_x : ndarray of shape (n_rows, n_states)
            Row ``i`` depends only on the state at its own time (:meth:`row_times`).
        J_theta : ndarray of shape (n_rows, n_params)
        """
        fast = self._numpy_jacobians(X, theta, fisher=False)
        return self._without_missing(fast if fast is not None else self._batched_jacobians(
            self._rows, X, theta))

    def _without_missing(self, jacobians):
        """Zeros in the rows of missing data: their rows are 0 whatever the model gives
        there, and a noise level of 0 where a datum is missing (a proportional error on a
        state at 0) made their derivative NaN, so NaN * 0 (Bachmann_MSB2011's J^T r was
        NaN in every component)."""
        missing = ~self.mask.ravel()
        if self.modelled_noise:
            missing = np.concatenate([missing, missing])
        if not missing.any():
            return jacobians
        return tuple(np.where(missing[:, None], 0.0, J) for J in jacobians)

    # ------------------------------------------------------------------ compiled derivatives
    def _compiled_observation(self):
        """The observation and noise models as compiled numpy grid functions (value and
        both Jacobians, :func:`~sklode.models._compile.compile_grid`), kept on the model;
        None where either does not compile (torch then differentiates the rows)."""
        model = self.model
        cache = derived(model).observation_grid
        if "functions" not in cache:
            n_obs, p = len(model.observables), model.n_params
            observe = noise = True
            if model.has_observation_model:
                observe = compile_grid(model.observe, model.n_states, p, n_obs,
                                       f"{model!r}.observe")
            if model.has_noise_model:
                noise = compile_grid(model.noise_sd, n_obs, p, n_obs, f"{model!r}.noise_sd")
            cache["functions"] = None if observe is None or noise is None else (observe,
                                                                                 noise)
        return cache["functions"]

    def _numpy_jacobians(self, X, theta, fisher):
        """:meth:`jacobians` (or :meth:`fisher_jacobians`) by the chain rule on the
        compiled observation and noise models: the rows are elementwise in ``h`` and ``s``,
        so only those need derivatives. None for Laplace columns or a model that does not
        compile (the torch path then)."""
        if self._any_laplace:
            return None
        functions = self._compiled_observation()
        if functions is None:
            return None
        X = np.asarray(X, dtype=np.float64)
        theta = np.asarray(theta, dtype=np.float64)
        observe, noise = functions
        n, d, p = X.shape[0], X.shape[1], theta.size
        cols = list(self.columns)
        with np.errstate(all="ignore"):
            if observe is True:
                H, HX, HT = X, np.broadcast_to(np.eye(d), (n, d, d)), np.zeros((n, d, p))
            else:
                H, HX, HT = (f(self.t, X, theta) for f in observe)
            h, hx, ht = H[:, cols], HX[:, cols], HT[:, cols]
            if self.modelled_noise:
                S, SH, ST = (f(self.t, H, theta) for f in noise)
                s = S[:, cols]
                sx = _chained(SH[:, cols], HX)
                st = ST[:, cols] + _chained(SH[:, cols], HT)
            else:
                s = self._sigma_or_ones().numpy()
                sx, st = np.zeros_like(hx), np.zeros_like(ht)
        self._check_values(h, s)  # the domain checks, on the values computed here
        with np.errstate(all="ignore"):
            is_log = self._is_log.numpy()
            divisor = self._log_divisor.numpy()
            slope = np.where(is_log, 1.0 / (np.where(is_log, h, 1.0) * divisor), 1.0)
            mask = self.mask.astype(np.float64)[..., None]
            if fisher:
                data = [(slope / s)[..., None] * z for z in (hx, ht)]
                k = np.sqrt(2.0)  # normal on any scale (Laplace columns took torch's path)
                noise_rows = [(k / s)[..., None] * z for z in (sx, st)]
            else:
                y = self._y_on_scale.numpy()
                on_scale = np.where(is_log, np.log(np.clip(h, 1e-300, None)) / divisor, h)
                r = (on_scale - y) / s
                data = [(slope[..., None] * a - r[..., None] * b) / s[..., None]
                        for a, b in ((hx, sx), (ht, st))]
                if self.modelled_noise:
                    inside = 2.0 * np.log(s) + self._offset.numpy()
                    root = np.sqrt(np.clip(inside, 0.0, None))
                    factor = np.where(inside > 0, 1.0 / (np.where(root > 0, root, 1.0) * s),
                                      0.0)
                    noise_rows = [factor[..., None] * z for z in (sx, st)]
        J = []
        missing = mask == 0  # zeros, not NaN * 0: a missing datum's y is NaN (Bachmann)
        for k_part in range(2):
            rows = np.where(missing, 0.0, data[k_part])
            if self.modelled_noise:
                rows = np.concatenate([rows, np.where(missing, 0.0, noise_rows[k_part])],
                                      axis=1)
            J.append(self._flat_jacobian(rows))
        return J[0], J[1]

    def _batched_jacobians(self, rows, X, theta):
        """Forward-mode derivatives of ``rows`` on the whole batch, one direction per state
        and parameter (each time's rows depend on its own state only, so a direction that
        moves every time's state at once gives every row's derivative in that state).
        Measured warm on 13 times x 2 states x 5 parameters: 2.7 ms, as a per-time
        ``vmap(jacfwd)`` (2.8 ms); both are a small part of a Jacobian evaluation."""
        X, theta = self._inputs(X, theta)
        args = (self._y_on_scale, self._sigma_or_ones(), self._mask)
        n, d, p = X.shape[0], X.shape[1], theta.shape[0]
        # directions only for the parameters the observation and noise model read (a PEtab
        # model's observables read a few of its dozens): the cost is per direction
        read = np.flatnonzero(self._parameters_read(p))
        q = read.size

        def along(tx, tth):
            return torch.func.jvp(lambda x, th: rows(self._t, x, th, *args), (X, theta),
                                  (tx, tth))[1]

        tx = torch.zeros((d + q, n, d), dtype=X.dtype)
        tx[torch.arange(d), :, torch.arange(d)] = 1.0
        tth = torch.zeros((d + q, p), dtype=X.dtype)
        tth[torch.arange(d, d + q), torch.from_numpy(read)] = 1.0
        with warnings.catch_warnings():
            # torch's forward mode loads its decompositions through torch.jit.script on
            # first use, which warns a DeprecationWarning about torch itself, not the user
            warnings.filterwarnings("ignore", message=".*torch.jit.script.*deprecated",
                                    category=DeprecationWarning)
            D = torch.func.vmap(along)(tx, tth).numpy()  # (d + p, n, k)
        J_x = np.moveaxis(D[:d], 0, -1)  # (n, k, d)
        J_theta = np.zeros(J_x.shape[:2] + (p,))
        J_theta[..., read] = np.moveaxis(D[d:], 0, -1)  # (n, k, p)
        return self._flat_jacobian(J_x), self._flat_jacobian(J_theta)

    def _parameters_read(self, n_params):
        """Which parameters the observation and noise model read (every one where that
        cannot be recorded), kept on the model."""
        cache = derived(self.model).observation_reads
        if n_params not in cache:
            model = self.model

            def observation(t, x, theta):
                h = model.observe(t, x, theta) if model.has_observation_model else x
                if not self.modelled_noise:
                    return h
                return torch.cat([h, model.noise_sd(t, h, theta)], dim=-1)

            read = parameters_read(observation, model.n_states, n_params)
            cache[n_params] = np.ones(n_params, dtype=bool) if read is None else read
        return cache[n_params]

    def _flat_jacobian(self, J):
        m = self.n_columns
        if not self.modelled_noise:
            return J.reshape(-1, J.shape[-1])
        return np.concatenate([J[:, :m].reshape(-1, J.shape[-1]),
                               J[:, m:].reshape(-1, J.shape[-1])])

    def row_times(self):
        """The time index of every residual row.

        Returns
        -------
        ndarray of int of shape (n_rows,)
        """
        per = np.repeat(np.arange(self.n_times), self.n_columns)
        return np.concatenate([per, per]) if self.modelled_noise else per

    def gradient(self, X, theta):
        """``1/2 ||R||^2`` and its gradient in the states at the observation times and in theta
        (one reverse pass).

        Parameters
        ----------
        X : ndarray of shape (n_times, n_states)
        theta : ndarray of shape (n_params,)

        Returns
        -------
        value : float
        grad_x : ndarray of shape (n_times, n_states)
        grad_theta : ndarray of shape (n_params,)
        """
        X, theta = self._inputs(X, theta)
        X.requires_grad_(True)
        theta.requires_grad_(True)
        with torch.enable_grad():
            rows = self._rows(self._t, X, theta, self._y_on_scale, self._sigma_or_ones(),
                              self._mask)
            value = 0.5 * torch.sum(rows**2)
            gx, gtheta = torch.autograd.grad(value, (X, theta), allow_unused=True)
        gtheta = torch.zeros_like(theta) if gtheta is None else gtheta
        value, gx, gtheta = float(value.detach()), gx.numpy(), gtheta.detach().numpy()
        if not (np.isfinite(value) and np.all(np.isfinite(gx))
                and np.all(np.isfinite(gtheta))):
            # 0 x NaN in the reverse pass from an observable that no datum reads (a 0/0 of
            # an assignment rule where its data are missing) computed beside those that
            # are read (Laske_PLOSComputBiol2019 at t = 0): the residual and the Jacobians
            # keep each row apart; their 1/2 r.r and J^T r are the value and gradient
            X_np, theta_np = X.detach().numpy(), theta.detach().numpy()
            r = self.residual(X_np, theta_np)
            value = 0.5 * float(r @ r)
            J_x, J_theta = self.jacobians(X_np, theta_np)
            gx = np.zeros(X_np.shape)
            np.add.at(gx, self.row_times(), J_x * r[:, None])
            gtheta = J_theta.T @ r
        return value, gx, gtheta

    def predicted(self, X, theta):
        """Predicted observables of the data's columns and their standard deviations.

        Parameters
        ----------
        X : ndarray of shape (n_times, n_states)
        theta : ndarray of shape (n_params,)

        Returns
        -------
        H : ndarray of shape (n_times, n_columns)
        S : ndarray of shape (n_times, n_columns)
        """
        X = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64))
        theta = torch.from_numpy(np.asarray(theta, dtype=np.float64).copy())
        with torch.no_grad():
            H, S = self._predicted(self._t, X, theta, self._sigma_or_ones())
        S = np.where(self.mask, S.numpy(), np.nan)
        return H.numpy(), S

    def neg_log_likelihood(self, X, theta):
        """``-log L`` of this experiment's observed entries (PEtab's convention).

        Parameters
        ----------
        X : ndarray of shape (n_times, n_states)
        theta : ndarray of shape (n_params,)

        Returns
        -------
        float
            inf where the likelihood is undefined (a log kind's prediction not positive).
        """
        H, S = self.predicted(X, theta)
        terms = neg_log_likelihood_terms(self.Y, H, S, self.kinds)[self.mask]
        return float(np.sum(terms)) if np.all(np.isfinite(terms)) else np.inf

    def cost_offset(self):
        """``1/2 ||R||^2 - (-log L)`` of this experiment's rows: a constant of the data.

        The rows' sum of squares is ``-log L`` without the constants that do not move the
        fit and with ``C/2`` per observation from the noise rows (module docstring).
        An optimiser whose stopping test is relative to the cost (Fides' ``frtol``) needs
        the cost on ``-log L``'s own scale to stop where pyPESTO's does: ``C`` adds about
        20 per observation, 3-20x the size of ``-log L`` on the PEtab problems.

        Returns
        -------
        float
            The constant, summed over the observed entries.
        """
        total = 0.0
        offset = self._offset.numpy()
        known = None if self.modelled_noise else self._sigma_or_ones().numpy()
        for j, kind in enumerate(self.kinds):
            observed = self.mask[:, j]
            # the noise rows' 1/2 (2 log s + C), or the log s the rows leave out when s is
            # known; Laplace rows square to |e| / s (its log 2 s term), the normal ones miss
            # 1/2 log 2 pi, and the log kinds also the density's log(y ln b)
            if self.modelled_noise:
                per = np.full(int(observed.sum()), 0.5 * offset[j])
            else:
                per = -np.log(known[observed, j])
            per = distribution_of(kind).without_constant(per, self.Y[observed, j])
            total += float(np.sum(per))
        return total


def _chained(outer, inner):
    """``einsum("nmk,nkd->nmd", outer, inner)`` where a zero of ``outer`` is a structural
    zero: an observable the noise model does not read contributes nothing, even where its
    own derivative is not finite (a 0/0 of an assignment rule at t = 0, Laske_PLOSComputBiol
    2019: else 0 x NaN made every derivative of the noise NaN)."""
    finite = np.isfinite(inner)
    product = np.einsum("nmk,nkd->nmd", outer, np.where(finite, inner, 0.0))
    reached = np.einsum("nmk,nkd->nmd", (outer != 0).astype(np.float64),
                        (~finite).astype(np.float64)) > 0
    return np.where(reached, np.nan, product)
