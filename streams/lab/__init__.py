"""The lab: what exercises the service without being it.

The simulator and its scenarios, the evaluator that scores the detectors on
them, the fault-injection runs (``peerwatch chaos``), the demo and the process
launchers (Kafka, Alertmanager, Prometheus, peerwatch children) used by the
demo, the benchmarks and the tests. Nothing in the live service (``streams``
outside this package, ``detectors``) imports from here; the service image
leaves it out.
"""
