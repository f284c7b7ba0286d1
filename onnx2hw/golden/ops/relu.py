import numpy as np


def run(node, x):
    return np.maximum(x, np.zeros((), dtype=x.dtype))
