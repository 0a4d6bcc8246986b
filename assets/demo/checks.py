"""User rungs: extra properties every version's output must have, checked after the reference.

Each function gets the inputs and outputs by name (numpy arrays) and the size variables, and
raises AssertionError with a message when the property fails.
"""

import numpy as np

from rung import rung


@rung("rows are unit RMS after dividing by w")
def unit_rms(inputs, outputs, sizes):
    x = np.asarray(inputs["x"], dtype=np.float64).reshape(sizes["rows"], sizes["cols"])
    w = np.asarray(inputs["w"], dtype=np.float64)
    y = np.asarray(outputs["y"], dtype=np.float64).reshape(x.shape)
    # Rows whose mean square is comparable to eps are legitimately below unit RMS: skip them.
    live = np.mean(x * x, axis=1) > 1e-3
    rms = np.sqrt(np.mean((y / w) ** 2, axis=1))
    bad = np.flatnonzero(live & ~np.isclose(rms, 1.0, rtol=0, atol=1e-3))
    if bad.size:
        r = int(bad[0])
        raise AssertionError(
            f"{bad.size} of {x.shape[0]} rows are not unit RMS after dividing by w; "
            f"first is row {r}: rms(y / w) = {rms[r]:.6f}, expected 1 +- 1e-3"
        )
