"""XID → severity and recovery action, all pure.

NVIDIA GPUs report hardware and software faults as XID codes, and each code
calls for a different recovery (report 000: the code *is* the recovery
strategy). One module per piece:

* :mod:`~detectors.xid.actions` — severities and the ranked resolution buckets;
* :mod:`~detectors.xid.catalog` — XID (+ sub-status) → entry, built and
  validated from the parsed ``xid.toml``;
* :mod:`~detectors.xid.events` — :class:`~detectors.xid.events.XidEvent`;
* :mod:`~detectors.xid.kernel_log` — ``NVRM: Xid …`` kernel lines → events;
* :mod:`~detectors.xid.gauge` — DCGM XID gauge changes → events;
* :mod:`~detectors.xid.escalation` — events → decisions, escalating repeats.
"""
