"""TopK: the ``k`` largest (``largest=1``, default) or smallest values along ``axis`` (default
-1) and their int64 indices; ``sorted`` results in order. Equal values keep the lower index
first, as the spec asks. Opset 1 takes ``k`` as an attribute, later opsets as an input."""
import numpy as np

from ._util import as_array, fail, norm_axis

__all__ = ["run"]


def run(node, x, k=None):
    x = as_array(x)
    k = int(node.attr("k", 1)) if node.since_version < 10 else int(np.asarray(k).reshape(-1)[0])
    axis = norm_axis(node, node.attr("axis", -1), x.ndim)
    if not 0 <= k <= x.shape[axis]:
        raise fail(node, f"k={k} is outside 0..{x.shape[axis]} for axis {axis}")
    largest = bool(node.attr("largest", 1))
    # a stable sort on the negated values keeps equal values in index order for largest=1
    key = x.astype(np.float64) if x.dtype.kind in "iub" else x
    order = np.argsort(-key if largest else key, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, idx, axis=axis), idx
