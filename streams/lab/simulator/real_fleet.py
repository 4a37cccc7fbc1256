"""Builders of the ``real-fleet`` scenarios: the shapes of DESIGN.md section 9, randomised per seed.

Each must-not-page condition of issue 8 has a scenario that varies it alone
on an otherwise plain cluster (no job label: the default settings group by
``cluster``; no spares; offsets inside the round): idle spares (0-5), scrape
offsets spread over the interval with 100-500 ms of jitter, checkpoint
cadence (20 min to 4 h) with the first save in the first minute or anywhere
in the cycle, restart-load length (5-60 min, the first save right after it or
an interval later), HA replica pairs, and job-label layouts (on every series,
only on dcgm-exporter's, none; ``train_job`` or ``hpc_job``; a role label or
not). Fail-stop XID faults run under all of these drawn together, once with
the job label vanishing in the XID's scrape; the quiet fleet draws everything
together for days (HA aside), with planned restarts. ``FLEET_FAMILIES``: what
node_exporter and dcgm-exporter send (no trainer gauges).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from streams.lab.simulator.conditions import PlannedRestart
from streams.lab.simulator.config import ALL_FAMILIES, TRAINER_FAMILY, ClusterConfig
from streams.lab.simulator.faults import EccFault, Fault, NvlinkBusFault

__all__ = [
    "FLEET_FAMILIES",
    "JOB_LABELS",
    "LAYOUTS",
    "QUIET_FLEET_DAYS",
    "WEEK_VARIANTS",
    "checkpoint_cadence",
    "fleet_week",
    "fleet_xid",
    "fleet_xid_vanishing_label",
    "ha_pair",
    "idle_spares",
    "label_layout",
    "plain_fleet",
    "quiet_fleet",
    "restart_load",
    "scrape_timing",
]

FLEET_FAMILIES = ALL_FAMILIES - {TRAINER_FAMILY}
LAYOUTS = ("all", "dcgm", "none")
JOB_LABELS = ("train_job", "hpc_job")
REPLICAS = ("replica-a", "replica-b")
ROLE_LABEL = "pipeline_stage"
QUIET_FLEET_DAYS = 2
MINUTE_S = 60.0
HOUR_S = 3600.0


def plain_fleet(base: ClusterConfig) -> ClusterConfig:
    """``base`` as a plain cluster: no job label, no spares, the fleet's exporters."""
    return replace(base, job_label=None, spares=0, metric_families=FLEET_FAMILIES)


def _layout(rng: np.random.Generator, base: ClusterConfig, layouts=LAYOUTS) -> ClusterConfig:
    """A job-label layout, label name and (half the time) a role label, drawn."""
    layout = layouts[int(rng.integers(len(layouts)))]
    label = JOB_LABELS[int(rng.integers(len(JOB_LABELS)))]
    role = ROLE_LABEL if rng.random() < 0.5 else None
    if layout == "none":
        return replace(base, job_label=None, role_label=None)
    return replace(base, job_label=label, job_label_on=layout, role_label=role)


def _cadence(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    """A save cadence of 20 min to 4 h (log-uniform); the first save in the first minute or
    anywhere in the cycle."""
    cadence_s = float(np.exp(rng.uniform(np.log(20 * MINUTE_S), np.log(4 * HOUR_S))))
    early = rng.random() < 0.5
    first_s = (
        float(rng.uniform(0, MINUTE_S)) if early else float(rng.uniform(0.05, 1.0)) * cadence_s
    )
    return replace(base, checkpoint_interval_s=cadence_s, first_save_s=first_s)


def _restart_load(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    """A restart load of 5-60 min; the first save right after it half the time."""
    load_s = float(rng.uniform(5, 60)) * MINUTE_S
    right_after = float(rng.uniform(0, MINUTE_S)) if rng.random() < 0.5 else None
    return replace(base, restart_load_s=load_s, restart_first_save_s=right_after)


def _timing(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    return replace(base, scrape_offsets="spread", scrape_jitter_ms=int(rng.integers(100, 501)))


def _restart_at(rng: np.random.Generator, base: ClusterConfig, lo_min: float, hi_min: float):
    at = base.start_ms + int(rng.uniform(lo_min, hi_min) * 60_000)
    return PlannedRestart(at, delay_s=float(rng.uniform(60, 300)))


# --- one condition each --------------------------------------------------------------------


def idle_spares(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    return replace(plain_fleet(base), spares=int(rng.integers(0, 6)))


def scrape_timing(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    return _timing(rng, plain_fleet(base))


def checkpoint_cadence(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    return _cadence(rng, plain_fleet(base))


def restart_load(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    cfg = _restart_load(rng, plain_fleet(base))
    return replace(cfg, faults=(*cfg.faults, _restart_at(rng, cfg, 5, 15)))


def ha_pair(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    return replace(plain_fleet(base), replicas=REPLICAS)


def label_layout(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    return replace(_layout(rng, plain_fleet(base)), spares=3)


# --- everything drawn together -------------------------------------------------------------


def _everything(
    rng: np.random.Generator, base: ClusterConfig, layouts=LAYOUTS, ha: bool = True
) -> ClusterConfig:
    """Every shape at once: spares 0-5, spread offsets, cadence, load, layout, HA half the time."""
    cfg = replace(plain_fleet(base), spares=int(rng.integers(0, 6)))
    cfg = _layout(rng, _restart_load(rng, _cadence(rng, _timing(rng, cfg))), layouts)
    pair = rng.random() < 0.5
    return replace(cfg, replicas=REPLICAS if ha and pair else ())


def _xid_fault(
    rng: np.random.Generator, cfg: ClusterConfig, lo_min: float = 20, hi_min: float = 35
) -> Fault:
    at = cfg.start_ms + int(rng.uniform(lo_min, hi_min) * 60_000)
    node = cfg.job_hosts[int(rng.integers(len(cfg.job_hosts)))]
    gpu = int(rng.integers(cfg.gpus_per_node))
    if rng.random() < 0.5:
        return NvlinkBusFault(node, gpu, at, xid_sequence=(int(rng.choice((145, 149))), 79))
    return EccFault(node, gpu, at)


def fleet_xid(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    cfg = _everything(rng, base)
    return replace(cfg, faults=(*cfg.faults, _xid_fault(rng, cfg)))


def fleet_xid_vanishing_label(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    cfg = replace(_everything(rng, base, layouts=("all", "dcgm")), job_label_vanishes_at_xid=True)
    return replace(cfg, faults=(*cfg.faults, _xid_fault(rng, cfg)))


def quiet_fleet(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
    """Days of healthy training in every shape, with a planned restart about twice a day.

    No HA pair here: it doubles the cost of the longest run (``fleet-ha-pair`` and
    the fail-stop runs have it).
    """
    cfg = _everything(rng, base, ha=False)
    restarts = tuple(
        _restart_at(rng, cfg, (k + 0.2) * 12 * 60, (k + 0.8) * 12 * 60)
        for k in range(QUIET_FLEET_DAYS * 2)
    )
    return replace(cfg, faults=(*cfg.faults, *restarts))


# --- the acceptance world: a week ------------------------------------------------------

WEEK_DAYS = 7
WEEK_VARIANTS = ("default", "gpu-labels", "ha-pair", "roles", "vanishing-label")


def fleet_week(variant: str):
    """A week of issue 8's cluster (60 + 3 spares, spread offsets with 100-500 ms of jitter,
    saves from the first minute) with three XID fail-stops, in one of ``WEEK_VARIANTS``:
    no job label (default settings), a GPU-only ``hpc_job``, an HA pair, role labels on
    ``train_job``, or a job label that vanishes in the XID's scrape."""
    if variant not in WEEK_VARIANTS:
        raise ValueError(f"unknown week variant {variant!r}; known: {', '.join(WEEK_VARIANTS)}")

    def build(rng: np.random.Generator, base: ClusterConfig) -> ClusterConfig:
        cfg = _timing(rng, replace(plain_fleet(base), spares=3))
        cadence = replace(_cadence(rng, cfg), first_save_s=float(rng.uniform(0, MINUTE_S)))
        cfg = _restart_load(rng, cadence)
        if variant == "gpu-labels":
            cfg = replace(cfg, job_label="hpc_job", job_label_on="dcgm")
        elif variant == "ha-pair":
            cfg = replace(cfg, replicas=REPLICAS)
        elif variant == "roles":
            cfg = replace(cfg, job_label="train_job", role_label=ROLE_LABEL)
        elif variant == "vanishing-label":
            label = JOB_LABELS[int(rng.integers(len(JOB_LABELS)))]
            layout = ("all", "dcgm")[int(rng.integers(2))]
            cfg = replace(cfg, job_label=label, job_label_on=layout, job_label_vanishes_at_xid=True)
        day_min = 24 * 60
        faults = tuple(
            _xid_fault(rng, cfg, (d + 0.3) * day_min, (d + 0.7) * day_min) for d in (1, 3, 5)
        )
        return replace(cfg, faults=(*cfg.faults, *faults))

    return build
