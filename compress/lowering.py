"""Linear layers lowered to plain matrices: a convolution or an average/sum pooling of a fixed input shape
is a linear map of the flattened (channel-major) input, so it can run wherever a dense layer runs. The
matrix of a convolution is sparse (each output reads only its kernel's taps); Lava stores only nonzero
synapses, and the Loihi 2 cost model counts only those."""
from __future__ import annotations

import numpy as np


def _tuple(v, n: int) -> tuple:
    a = np.asarray(v).reshape(-1)
    return tuple(int(x) for x in (np.repeat(a, n) if a.size == 1 else a))


def _apply(fn, shape: tuple) -> tuple[np.ndarray, tuple]:
    import torch

    n_in = int(np.prod(shape))
    eye = torch.eye(n_in, dtype=torch.float64).reshape(n_in, *shape)  # every input unit alone, as a batch
    with torch.no_grad():
        y = fn(eye)
    return y.reshape(n_in, -1).T.numpy().copy(), tuple(int(d) for d in y.shape[1:])


def conv_matrix(weight: np.ndarray, bias, shape: tuple, stride=1, padding=0, dilation=1,
                groups: int = 1) -> tuple[np.ndarray, np.ndarray, tuple]:
    """(matrix (out, in), bias (out,), output shape) of a 1-D or 2-D convolution on inputs of ``shape``
    ((channels, length) or (channels, height, width)); ``padding`` may be a string torch accepts."""
    import torch
    import torch.nn.functional as F

    dims = len(shape) - 1
    w = torch.as_tensor(np.asarray(weight, np.float64))
    conv = F.conv1d if dims == 1 else F.conv2d
    pad = padding if isinstance(padding, str) else _tuple(padding, dims)
    m, out_shape = _apply(lambda x: conv(x, w, None, _tuple(stride, dims), pad, _tuple(dilation, dims), int(groups)),
                          tuple(shape))
    b = np.zeros(w.shape[0]) if bias is None else np.asarray(bias, np.float64).reshape(-1)
    return m, np.repeat(b, int(np.prod(out_shape[1:]))), out_shape


def pool_matrix(shape: tuple, kernel, stride, padding=0, sum_pool: bool = False) -> tuple[np.ndarray, tuple]:
    """(matrix, output shape) of a 2-D average (or sum) pooling on inputs of shape (channels, height, width)."""
    import torch.nn.functional as F

    k = _tuple(kernel, 2)
    m, out_shape = _apply(lambda x: F.avg_pool2d(x, k, _tuple(stride, 2), _tuple(padding, 2), count_include_pad=True),
                          tuple(shape))
    return (m * (k[0] * k[1]) if sum_pool else m), out_shape
