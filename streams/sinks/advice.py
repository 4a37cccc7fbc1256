"""The advice record on ``peerwatch.alerts``: an advisor's :class:`Advice` as one JSON object.

Told apart from the alert records on the same topic by ``"record": "advice"`` (an
alert record has ``status`` and ``labels`` and no ``record``); the rest is
``Advice.to_dict()`` (docs/architecture.md, "Job lifecycle events, retry advice and the
node ledger"). Key: the node it concerns, else the group.
"""

from __future__ import annotations

import json

from detectors.vocabulary import Advice

__all__ = ["ADVICE_RECORD", "advice_key", "advice_record", "decode_advice"]

ADVICE_RECORD = "advice"


def advice_record(advice: Advice) -> bytes:
    return json.dumps({"record": ADVICE_RECORD, **advice.to_dict()}, sort_keys=True).encode()


def advice_key(advice: Advice) -> str:
    return advice.node or advice.group


def decode_advice(value: bytes | None) -> Advice | None:
    """The advice in a record of the alerts topic; None for an alert record or anything else."""
    try:
        data = json.loads(value or b"")
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("record") != ADVICE_RECORD:
        return None
    try:
        return Advice.from_dict(data)
    except (KeyError, TypeError, ValueError):
        return None
