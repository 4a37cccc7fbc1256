"""Advice, the advisors' word: JSON-safe and back unchanged."""

from __future__ import annotations

import json
import math

from detectors.vocabulary import Advice


def test_advice_round_trips_through_json() -> None:
    advice = Advice(
        advisor="checkpoint_interval",
        kind="lengthen_interval",
        group="job-7",
        bucket_ts=1_700_000_010_000,
        summary="saves every 600 s; the optimum is 1,800 s",
        nodes=("gpu001", "gpu002"),
        figures=(("interval_s", 600.0), ("optimum_s", 1800.0), ("saves", 12)),
        action="set_checkpoint_interval",
    )
    back = Advice.from_dict(json.loads(json.dumps(advice.to_dict())))
    assert back == advice


def test_a_non_finite_figure_becomes_null() -> None:
    advice = Advice(
        "ledger", "chronic_node", "job-7", 0, "x", node="gpu003", figures=(("mtbf_h", math.inf),)
    )
    d = advice.to_dict()
    assert d["figures"] == {"mtbf_h": None}
    assert json.dumps(d, allow_nan=False)
    assert Advice.from_dict(d).figures == (("mtbf_h", None),)
