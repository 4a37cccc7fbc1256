"""Regenerate ``fixed_runs.json``: ``python tests/unit/data/snapshots/make_fixed_runs.py``.

For two fixed runs, every group's snapshot after every due call, as the changelogged
table encodes it (``STATE_CODEC``), reduced to what holds on every machine: the
*skeleton* (keys in their order, strings, ints, booleans and nulls exactly, each float
as a placeholder) hashed over all snapshots, and the floats of the last snapshot, which
``test_state_codec`` compares within a tolerance. numpy's and OpenBLAS' kernels differ
between CPUs in the last bits, so raw bytes held only on the machine that wrote them; the
float arrays written as base64 (``FLOAT_ARRAYS``) count as floats too (on an AMD EPYC,
``m2_upper``'s bytes differed from the Intel Xeon's that wrote the digest). Regenerated from
the tree whose raw bytes matched f1ae716's digests (the generic field walk): only
regenerate for an intentional format change.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
# (scenario, nodes, minutes, onset minute): firing XID alerts, escalation history; and
# row-remap findings (a verdict's key order, a finding's until_ms)
RUNS = (("ecc-xid94", 8, 24, 10), ("uncorrectable-remap", 8, 40, 10))
# the fields written with ``state_codec.ndarray("<f8", ...)``: multivariate.ModelState's
# and baseline's arrays (the "<u2" counters stay exact)
FLOAT_ARRAYS = frozenset({"mean", "m2_upper", "var", "candidate"})


def fingerprint(bodies: list[bytes]) -> dict[str, object]:
    """The skeleton digest of ``bodies`` and the floats of the last one, in order."""
    skeleton = hashlib.sha256()
    floats: list[float] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            skeleton.update(b"{")
            for key, item in value.items():
                skeleton.update(json.dumps(key).encode() + b":")
                if key in FLOAT_ARRAYS and isinstance(item, str):
                    item = np.frombuffer(base64.b64decode(item), dtype="<f8").tolist()
                walk(item)
            skeleton.update(b"}")
        elif isinstance(value, list):
            skeleton.update(b"[")
            for item in value:
                walk(item)
            skeleton.update(b"]")
        elif isinstance(value, float):
            floats.append(value)
            skeleton.update(b"f,")
        else:
            skeleton.update(json.dumps(value).encode() + b",")

    for body in bodies:
        floats.clear()
        walk(json.loads(body))
    return {"snapshots": len(bodies), "skeleton": skeleton.hexdigest(), "last_floats": floats}


def encoded_snapshots(
    run: tuple[str, int, int, int], snapshot: Callable[..., object]
) -> list[bytes]:
    """What the worker's table holds after each due call of ``run`` (``make.snapshot``)."""
    from streams.worker.app import STATE_CODEC

    bodies: list[bytes] = []
    snapshot(*run, after_bucket=lambda p, g: bodies.append(STATE_CODEC.dumps(p.snapshot(g))))
    return bodies


if __name__ == "__main__":
    from make import snapshot  # type: ignore[import-not-found]

    golden = {
        "/".join(map(str, run)): fingerprint(encoded_snapshots(run, snapshot)) for run in RUNS
    }
    path = HERE / "fixed_runs.json"
    path.write_text(json.dumps(golden, indent=1) + "\n")
    print(path, path.stat().st_size, file=sys.stderr)
