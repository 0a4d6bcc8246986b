"""The trusted reference: slow and obviously right. rung calls `reference` with numpy arrays
bound by name to rung.toml's inputs, scalars and sizes, and compares every version with it."""

import numpy as np


def reference(a, b, **_):
    return (a.astype(np.float64) + b.astype(np.float64)).astype(np.float32)
