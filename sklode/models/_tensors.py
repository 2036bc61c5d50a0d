"""Arrays as float64 torch tensors (no copy where possible), and a scatter-add: the small
conversions every derived form of a model uses."""

from __future__ import annotations

import numpy as np
import scipy.sparse
import torch

__all__ = ["sum_by_index"]

_DTYPE = torch.float64



def _as_tensor(a):
    """float64 torch view of an array-like (no copy when already float64, contiguous, writable).

    Read-only inputs (memmaps, cached data) are copied: torch cannot wrap them safely, and
    inputs are never written to.
    """
    a = np.ascontiguousarray(a, dtype=np.float64)
    if not a.flags.writeable:
        a = a.copy()
    return torch.from_numpy(a)



def _time_tensor(t, batch_shape):
    """Time as a tensor broadcastable against ``x[..., 0]``."""
    t = np.asarray(t, dtype=np.float64)
    if t.ndim == 0:
        return torch.tensor(float(t), dtype=_DTYPE)
    return _as_tensor(np.broadcast_to(t, batch_shape))



def sum_by_index(values, index, size):
    """``out[..., i] = sum of values[..., k] over the k with index[k] == i``.

    The entries of a sparse Jacobian (:meth:`ODEModel.jac_x_sparse`) gathered per equation
    (``index = rows``) or per state (``cols``), as one sparse matrix product.

    Parameters
    ----------
    values : ndarray of shape (..., nnz)
    index : ndarray of int of shape (nnz,)
    size : int

    Returns
    -------
    ndarray of shape (..., size)
    """
    gather = scipy.sparse.csr_matrix((np.ones(index.size), index, np.arange(index.size + 1)),
                                     shape=(index.size, size))
    flat = values.reshape(-1, index.size)
    return np.asarray(flat @ gather).reshape(values.shape[:-1] + (size,))
