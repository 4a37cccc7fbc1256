"""What real fleets do to the series a simulated node sends (DESIGN.md section 9).

The simulator's tidy defaults -- a job label on every series, offsets that keep
a round's samples inside its bucket, one Prometheus -- are not what peerwatch
meets in production. This module holds the shapes ``ClusterConfig`` can ask
for instead:

- job-label layouts: on every series, or only on dcgm-exporter's GPU series
  (``hpc_job`` from Slurm's job-mapping files), or none; optionally a role
  label (the node's pipeline stage) beside it, and the label vanishing in the
  scrape that first shows the XID that killed the job;
- scrape offsets hashed per target over the whole interval, as Prometheus does
  (``offset = hash(target) ^ seed mod interval``), plus jitter;
- HA pairs: every series once per replica with a replica label, each replica
  at its own offsets and jitter.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np

from streams.lab.simulator.layout import sorted_labels, trainer_roles
from streams.lab.simulator.state import DCGM, TARGETS

if TYPE_CHECKING:
    from streams.lab.simulator.config import ClusterConfig
    from streams.lab.simulator.timeline import JobEpoch

# Seed-sequence keys of the replicas' own offset and jitter streams.
_REPLICA_OFFSET_STREAM = 0x0FF5
_REPLICA_JITTER_STREAM = 0x717E


def target_addresses(config: ClusterConfig, host: str) -> tuple[str, str, str]:
    """The node's scrape targets in ``TARGETS`` order (node_exporter, dcgm, trainer)."""
    ports = (config.node_exporter_port, config.dcgm_port, config.trainer_port)
    return tuple(f"{host}:{port}" for port in ports)  # type: ignore[return-value]


def hashed_offset_ms(seed: int, replica: str, address: str, interval_ms: int) -> int:
    """A target's scrape offset in ``[0, interval_ms)``: a hash of the target, like Prometheus."""
    digest = hashlib.blake2b(f"{seed}|{replica}|{address}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % interval_ms


def scrape_offsets(config: ClusterConfig, inside: np.ndarray, replica: int) -> np.ndarray:
    """(nodes, targets) offsets of replica ``replica``'s scrapes within the interval.

    ``inside``: the traits' offsets (drawn so jittered samples stay in their
    bucket), used as they are by the first replica in ``"inside"`` mode.
    """
    if config.scrape_offsets == "inside":
        if replica == 0:
            return inside
        rng = np.random.default_rng((config.seed, _REPLICA_OFFSET_STREAM, replica))
        jitter = config.scrape_jitter_ms
        return rng.integers(jitter + 1, config.interval_ms - jitter - 1, size=inside.shape)
    # A round's samples show that round's state, so none may be stamped before the
    # round (evidence before its ground truth): offsets start past the jitter, and
    # samples cross only the round's end, landing up to the jitter in the next bucket.
    name = config.replicas[replica] if config.replicas else ""
    lowest = config.scrape_jitter_ms + 1
    return lowest + np.array(
        [
            [
                hashed_offset_ms(config.seed, name, address, config.interval_ms - lowest)
                for address in target_addresses(config, host)
            ]
            for host in config.hosts
        ],
        dtype=np.int64,
    )


def replica_jitter(config: ClusterConfig, replica: int, round_index: int, nodes: int) -> np.ndarray:
    """(nodes, targets) jitter of a second (third, ...) replica's scrapes in one round."""
    rng = np.random.default_rng((config.seed, _REPLICA_JITTER_STREAM, replica, round_index))
    j = config.scrape_jitter_ms
    return rng.integers(-j, j + 1, size=(nodes, len(TARGETS)))


def with_replica(labels: dict[str, str], config: ClusterConfig, replica: int) -> dict[str, str]:
    """``labels`` plus the replica's external label (unchanged without replicas)."""
    if not config.replicas:
        return labels
    return sorted_labels({**labels, config.replica_label: config.replicas[replica]})


def job_labelled(
    config: ClusterConfig, node_labels: list[dict[str, str]], col_target: np.ndarray, role: str
) -> list[dict[str, str]]:
    """A job node's label sets with the job (and role) label where the layout puts them."""
    if config.job_label is None:
        raise ValueError("no job_label to put on the job's series")
    extra = {config.job_label: config.job_name}
    if config.role_label:
        extra[config.role_label] = role
    return [
        sorted_labels({**lbl, **extra})
        if config.job_label_on == "all" or col_target[c] == DCGM
        else lbl
        for c, lbl in enumerate(node_labels)
    ]


def node_roles(config: ClusterConfig, epoch: JobEpoch) -> dict[int, str]:
    """Node index -> its pipeline stage in ``epoch`` (by rank)."""
    members = len(epoch.members)
    return {
        node: trainer_roles(rank, members, config.pipeline_stages)[1]
        for rank, node in enumerate(epoch.members)
    }


def label_vanishes_from_ms(config: ClusterConfig, epoch: JobEpoch) -> int | None:
    """The round from which ``epoch``'s nodes lose the job label (None: they keep it).

    With ``job_label_vanishes_at_xid``: the round holding the XID of the fault
    that stopped the epoch, when that fault logs one.
    """
    if not config.job_label_vanishes_at_xid or epoch.cause is None:
        return None
    xid_ms = epoch.cause.ground_truth().xid_ms
    if xid_ms is None:
        return None
    interval = config.interval_ms
    return config.start_ms + (xid_ms - config.start_ms) // interval * interval
