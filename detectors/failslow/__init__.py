"""Fail-slow: a training job that is alive but slow, and who is to blame (GREYHOUND, issue 3).

One idea per module, all pure (arrays and dataclasses in, dataclasses out;
state frozen and JSON-safe through ``to_dict`` / ``from_dict``):

* :mod:`~detectors.failslow.changepoint` — BOCPD on the job's throughput,
  confirmed when the shift is >= 10 % and sustained (3 buckets = 90 s);
* :mod:`~detectors.failslow.cycles` — the job's dip schedule (checkpoints,
  evaluation) from autocorrelation, so periodic dips are not change points;
* :mod:`~detectors.failslow.localise` — culprit node / GPU and class
  (compute, cpu, network, cluster-wide) by comparing peers of the same role;
* :mod:`~detectors.failslow.mitigation` — S1 observe → S2 rebalance → S3
  topology → S4 restart without the node, as far as the loss pays for;
* :mod:`~detectors.failslow.slo` (with :class:`detectors.quantile.QuantileSketch`) —
  throughput-SLO accounting and incidents;
* :mod:`~detectors.failslow.monitor` — the per-job, per-bucket step that
  threads the five together for the stream worker;
* :mod:`~detectors.failslow.inputs` — one bucket's frames → the job's
  throughput, GPU count and per-node :class:`~detectors.failslow.localise.NodeMetrics`;
* :mod:`~detectors.failslow.alerts` — verdicts → ``PeerwatchFailSlow`` (per
  culprit node) and ``PeerwatchJobSlow`` (the job, no node to blame) alert
  transitions, with the advised stage as their action.
"""
