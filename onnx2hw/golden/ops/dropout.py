"""Dropout in inference: the output is the input, the optional mask is all True.

Opsets < 7 have an ``is_test`` attribute, ignored (this executor always infers,
as exporters of that era left it 0 in inference graphs); opsets 1-11 carry ``ratio``
as an attribute; from 12 ``ratio`` and ``training_mode`` are optional inputs. Training
mode with a ratio above 0 draws random numbers and is rejected; with ratio 0 it is
the identity too. Before opset 10 the mask has the input's type, from 10 bool.
"""
import numpy as np

from ._util import as_array, fail

__all__ = ["run"]


def run(node, x, ratio=None, training_mode=None):
    x = as_array(x)
    if node.since_version >= 12:
        training = bool(np.asarray(training_mode).reshape(())) if training_mode is not None else False
        ratio = 0.5 if ratio is None else float(np.asarray(ratio).reshape(()))
    else:
        training, ratio = False, float(node.attr("ratio", 0.5))
    if training and ratio > 0:
        raise fail(node, f"training-mode Dropout (ratio {ratio!r}) is not supported")
    if len(node.outputs) < 2 or not node.outputs[1]:
        return x
    mask_dtype = np.bool_ if node.since_version >= 10 else x.dtype
    return x, np.ones(x.shape, dtype=mask_dtype)
