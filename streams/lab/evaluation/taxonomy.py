"""What each ground-truth kind should produce, and which class an alert claims.

Two tables, both plain data that a caller may extend or replace:

* :data:`FAULT_EXPECTATIONS` — fault kind → the fault class(es) an alert must
  name to be "class right", the *category* that decides which target the fault
  counts towards, and whether it should page a node at all.
* :data:`FAMILY_CLASSES` — alertname → the class an alert of that family claims
  when it carries no ``class`` label itself.

Fault classes (``FAULT_CLASSES``): ``compute`` (a GPU slow or failing at its
work), ``network`` (the node's link or NIC), ``memory`` (GPU memory: ECC,
row remapping), ``interconnect`` (NVLink, PCIe / fallen off the bus), ``host``
(the host or its exporter down, the OS), ``cpu`` (CPU contention on the host),
``cluster-wide`` (the whole group moved: no node to blame).

===================== ======================== ============== =====
kind                  expected class(es)       category       page
===================== ======================== ============== =====
nvlink_bus_fault      interconnect             fail_stop      yes
ecc_error             memory                   fail_stop      yes
uncorrectable_remap   memory                   fail_stop      yes
row_remap_creep       memory                   remap_creep    yes
node_silent           host                     host_down      yes
gpu_slow              compute                  fail_slow      yes
cpu_contention        cpu                      fail_slow      yes
network_congestion    network                  fail_slow      yes
congestion_thermal    network, compute         fail_slow      yes
hot_gpu               —                        must_not_page  no
fabric_congestion     cluster-wide             must_not_page  no
power_cap             cluster-wide             must_not_page  no
two_populations       —                        must_not_page  no
late_scrape           —                        must_not_page  no
===================== ======================== ============== =====

Rows whose ``GroundTruth.is_fault`` is False (job death, restart load,
checkpoint save, spare joined, planned restart, and the simulator's
``BENIGN_KINDS``) are must-not-page events whatever this table says; the
must-not-page rows above only keep the table complete for other sources.
``nvlink_bus_fault``, ``ecc_error`` and ``node_silent`` exist in the simulator;
the fail-slow and row-remap kinds are the scenario library's to settle, and a
kind that is missing here is an error (:func:`expectation_for`), never
silently scored.

The compound "congestion plus thermal throttling" accepts either of its two
causes; every other kind accepts exactly one class. An alert without a class
(no label, a family that does not say) is never class-right: the evaluator does
not guess a class from signals, because that would grade the evaluator's guess
rather than the detector's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from detectors.families import REGISTRY

__all__ = [
    "CATEGORIES",
    "FAMILY_CLASSES",
    "FAULT_CLASSES",
    "FAULT_EXPECTATIONS",
    "Category",
    "FaultExpectation",
    "expectation_for",
    "family_class",
]

COMPUTE = "compute"
NETWORK = "network"
MEMORY = "memory"
INTERCONNECT = "interconnect"
HOST = "host"
CPU = "cpu"
CLUSTER_WIDE = "cluster-wide"
FAULT_CLASSES = (COMPUTE, NETWORK, MEMORY, INTERCONNECT, HOST, CPU, CLUSTER_WIDE)

Category = Literal["fail_stop", "remap_creep", "fail_slow", "host_down", "must_not_page"]
CATEGORIES: tuple[Category, ...] = (
    "fail_stop",
    "remap_creep",
    "fail_slow",
    "host_down",
    "must_not_page",
)


@dataclass(frozen=True)
class FaultExpectation:
    """What a ground-truth kind should produce.

    ``classes``: the fault classes an alert may name to be class-right (empty
    for kinds that must not page). ``category``: which target the kind counts
    towards. ``page`` is False exactly for the ``must_not_page`` category.
    """

    classes: tuple[str, ...]
    category: Category

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r}; known: {CATEGORIES}")
        unknown = [c for c in self.classes if c not in FAULT_CLASSES]
        if unknown:
            raise ValueError(f"unknown fault class(es) {unknown}; known: {FAULT_CLASSES}")
        if self.page and not self.classes:
            raise ValueError(f"a {self.category} fault needs at least one expected class")

    @property
    def page(self) -> bool:
        return self.category != "must_not_page"


FAULT_EXPECTATIONS: Mapping[str, FaultExpectation] = {
    "nvlink_bus_fault": FaultExpectation((INTERCONNECT,), "fail_stop"),
    "ecc_error": FaultExpectation((MEMORY,), "fail_stop"),
    "uncorrectable_remap": FaultExpectation((MEMORY,), "fail_stop"),
    "row_remap_creep": FaultExpectation((MEMORY,), "remap_creep"),
    "node_silent": FaultExpectation((HOST,), "host_down"),
    "gpu_slow": FaultExpectation((COMPUTE,), "fail_slow"),
    "cpu_contention": FaultExpectation((CPU,), "fail_slow"),
    "network_congestion": FaultExpectation((NETWORK,), "fail_slow"),
    "congestion_thermal": FaultExpectation((NETWORK, COMPUTE), "fail_slow"),
    "hot_gpu": FaultExpectation((), "must_not_page"),
    "fabric_congestion": FaultExpectation((CLUSTER_WIDE,), "must_not_page"),
    "power_cap": FaultExpectation((CLUSTER_WIDE,), "must_not_page"),
    "two_populations": FaultExpectation((), "must_not_page"),
    "late_scrape": FaultExpectation((), "must_not_page"),
}

# The class a family claims by construction (detectors.families): collapse and deviation do
# not (procs_running -> 0 is what any fail-stop looks like), nor an XID alert by its name
# alone (79 is the bus, 94 memory): it needs a class label.
FAMILY_CLASSES: Mapping[str, str | None] = {f.name: f.klass for f in REGISTRY.values()}


def expectation_for(
    kind: str, expectations: Mapping[str, FaultExpectation] = FAULT_EXPECTATIONS
) -> FaultExpectation:
    """The expectation of a fault ``kind``; ValueError when the table lacks it."""
    try:
        return expectations[kind]
    except KeyError:
        raise ValueError(
            f"no expectation for fault kind {kind!r}: add it to FAULT_EXPECTATIONS "
            f"(known: {', '.join(sorted(expectations))})"
        ) from None


def family_class(alertname: str, families: Mapping[str, str | None] = FAMILY_CLASSES) -> str | None:
    """The class an alert of ``alertname`` claims without a label (None: it does not say)."""
    return families.get(alertname)
