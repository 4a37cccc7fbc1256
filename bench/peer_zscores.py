"""Peer robust z of one group's bucket, beside the np.nanmedian formula it computes.

    python -m bench.peer_zscores [--nodes 60] [--features 305] [--repeat 200]

One bucket's matrix (``--nodes`` × ``--features``, 5 % missing, as a 60-node job
with the full catalog): ``detectors.peer.peer_zscores`` against the same z
computed with ``np.nanmedian`` column-wise (the reference the unit tests check it
against). Prints the median and the fastest of ``--repeat`` calls for each, and
their ratio. Not asserted anywhere: a figure, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np

from detectors.peer import MAD_TO_SIGMA, peer_zscores


def reference_z(m: np.ndarray, abs_floor: np.ndarray, rel_floor: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        med = np.nanmedian(m, axis=0)
        mad = np.nanmedian(np.abs(m - med), axis=0)
    result: np.ndarray = (m - med) / (
        MAD_TO_SIGMA * mad + np.maximum(abs_floor, rel_floor * np.abs(med))
    )
    return result


def timings(fn: Callable[[], object], repeat: int) -> list[float]:
    fn()  # warm
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=60)
    ap.add_argument("--features", type=int, default=305)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(7)
    m = rng.normal(size=(args.nodes, args.features))
    m[rng.random(m.shape) < 0.05] = np.nan
    abs_floor, rel_floor = np.full(args.features, 1e-3), np.full(args.features, 0.01)
    runs = {
        "peer_zscores": timings(lambda: peer_zscores(m, abs_floor, rel_floor, 8), args.repeat),
        "np.nanmedian reference": timings(
            lambda: reference_z(m, abs_floor, rel_floor), args.repeat
        ),
    }
    base = statistics.median(runs["np.nanmedian reference"])
    print(f"{args.nodes} nodes x {args.features} features, {args.repeat} calls each")
    for name, ts in runs.items():
        med = statistics.median(ts)
        print(f"  {name:<24} median {med * 1e3:7.3f} ms  fastest {min(ts) * 1e3:7.3f} ms  "
              f"{base / med:5.2f}x the reference")  # fmt: skip


if __name__ == "__main__":
    main()
