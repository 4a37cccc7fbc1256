"""Which series a node exports, in which column order, with which labels.

A round's values are one ``(nodes, columns)`` array; this module fixes what
each column is. Node_exporter columns come first, then dcgm-exporter's; the
trainer's two gauges are built apart (only members that train export them,
and their role labels follow the rank). Optional metric families add columns:

=============  ================================================================================
family         series (labels beyond instance / job / cluster)
=============  ================================================================================
(base)         ``node_intr_total``, ``node_procs_running``, ``node_vmstat_pgpgout``,
               ``node_mountstats_nfs_operations_{requests,response_time_seconds,
               queue_time_seconds}_total{operation}``, ``node_mountstats_nfs_{read,write}
               _bytes_total`` (+ export, mountaddress, protocol); ``DCGM_FI_DEV_GPU_UTIL``,
               ``DCGM_FI_DEV_POWER_USAGE``, ``DCGM_FI_DEV_GPU_TEMP``, ``DCGM_FI_DEV_XID_ERRORS``
               (+ gpu, UUID, pci_bus_id, device, modelName, Hostname)
``cpu``        ``node_cpu_seconds_total{cpu, mode}`` for modes idle / iowait / system / user
               (irq, nice, softirq, steal are left out: ~0 on these hosts) on
               ``cpus_per_node`` CPUs, ``node_load1``, ``node_procs_blocked``,
               ``node_context_switches_total``
``memory``     ``node_memory_Shmem_bytes``, ``node_memory_MemAvailable_bytes``
``infiniband`` ``node_infiniband_port_transmit_wait_total``,
               ``node_infiniband_port_data_transmitted_bytes_total``,
               ``node_infiniband_port_data_received_bytes_total`` {device="mlx5_<k>", port="1"}
``gpu_perf``   ``DCGM_FI_PROF_SM_ACTIVE`` (0-1), ``DCGM_FI_DEV_SM_CLOCK`` (MHz),
               ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS`` (NVML bitmask), ``DCGM_FI_DEV_MEMORY_TEMP``
``row_remap``  ``DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS``,
               ``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS``, ``DCGM_FI_DEV_ROW_REMAP_FAILURE``,
               ``DCGM_FI_DEV_ROW_REMAP_PENDING`` (DCGM field 396; not in dcgm-exporter's
               default counters CSV, exported by adding that line to it -- the series name
               is the field name, as for every other field)
``trainer``    ``trainer_iteration_time_seconds``, ``trainer_tokens_per_second`` on
               ``<host>:9500`` / ``job="trainer"`` {<job label>, dp_group, pp_stage}
=============  ================================================================================
"""

from __future__ import annotations

import numpy as np

from streams.lab.simulator.config import (
    CPU,
    GPU_PERF,
    INFINIBAND,
    MEMORY,
    ROW_REMAP,
    TRAINER_FAMILY,
    ClusterConfig,
)
from streams.lab.simulator.state import DCGM, NFS_OPERATIONS, NODE_EXPORTER

NFS_COUNTERS = (
    "node_mountstats_nfs_operations_requests_total",
    "node_mountstats_nfs_operations_response_time_seconds_total",
    "node_mountstats_nfs_operations_queue_time_seconds_total",
)
NODE_SCALARS = ("node_intr_total", "node_procs_running", "node_vmstat_pgpgout")
NFS_BYTES = ("node_mountstats_nfs_read_bytes_total", "node_mountstats_nfs_write_bytes_total")
BASE_NODE_COLUMNS = len(NODE_SCALARS) + len(NFS_COUNTERS) * len(NFS_OPERATIONS) + len(NFS_BYTES)
CPU_MODES = ("idle", "iowait", "system", "user")
HOST_GAUGES = ("node_load1", "node_procs_blocked", "node_context_switches_total")
MEMORY_GAUGES = ("node_memory_Shmem_bytes", "node_memory_MemAvailable_bytes")
IB_COUNTERS = (
    "node_infiniband_port_transmit_wait_total",
    "node_infiniband_port_data_transmitted_bytes_total",
    "node_infiniband_port_data_received_bytes_total",
)
BASE_GPU_GAUGES = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_XID_ERRORS",
)
PERF_GPU_GAUGES = (
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "DCGM_FI_DEV_MEMORY_TEMP",
)
REMAP_GPU_GAUGES = (
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DEV_ROW_REMAP_PENDING",
)
TRAINER_GAUGES = ("trainer_iteration_time_seconds", "trainer_tokens_per_second")

# PCI bus ids of the eight GPUs on an HGX board, as nvidia-smi prints them.
_HGX_BUS_IDS = ("1B", "43", "52", "61", "9D", "C3", "D1", "DF")


def pci_bus_id(gpu: int) -> str:
    """The PCI bus id dcgm-exporter reports for GPU ``gpu`` of a node."""
    bus = _HGX_BUS_IDS[gpu] if gpu < len(_HGX_BUS_IDS) else f"{0xE8 + gpu:02X}"
    return f"00000000:{bus}:00.0"


def sorted_labels(labels: dict[str, str]) -> dict[str, str]:
    return {k: labels[k] for k in sorted(labels)}


class SeriesLayout:
    """Column order of one node's series for a config's enabled families.

    Node_exporter columns: the base 14, then (``cpu``) ``cpus x modes`` CPU
    counters and the three host gauges, (``memory``) two gauges,
    (``infiniband``) three counters per port, port-major. Dcgm columns:
    ``gauges x gpus``, gauge-major, base gauges first. Attributes hold the
    slices the simulator fills.
    """

    def __init__(self, config: ClusterConfig):
        families = config.metric_families
        self.cpus = config.cpus_per_node if CPU in families else 0
        self.host = CPU in families
        self.memory = MEMORY in families
        self.ports = config.ib_devices if INFINIBAND in families else 0
        self.gpu_gauges = (
            BASE_GPU_GAUGES
            + (PERF_GPU_GAUGES if GPU_PERF in families else ())
            + (REMAP_GPU_GAUGES if ROW_REMAP in families else ())
        )
        self.gpu_perf = GPU_PERF in families
        self.row_remap = ROW_REMAP in families
        self.trainer = TRAINER_FAMILY in families
        self.gpus = config.gpus_per_node
        at = BASE_NODE_COLUMNS
        self.cpu_cols = slice(at, at + self.cpus * len(CPU_MODES))
        at = self.cpu_cols.stop
        self.host_cols = slice(at, at + (len(HOST_GAUGES) if self.host else 0))
        at = self.host_cols.stop
        self.memory_cols = slice(at, at + (len(MEMORY_GAUGES) if self.memory else 0))
        at = self.memory_cols.stop
        self.ib_cols = slice(at, at + self.ports * len(IB_COUNTERS))
        self.node_columns = self.ib_cols.stop
        self.gpu_cols = slice(
            self.node_columns, self.node_columns + len(self.gpu_gauges) * self.gpus
        )
        self.columns = self.gpu_cols.stop
        self.col_target = np.full(self.columns, NODE_EXPORTER)
        self.col_target[self.gpu_cols] = DCGM
        self.col_gpu = np.full(self.columns, -1)
        self.col_gpu[self.gpu_cols] = np.tile(np.arange(self.gpus), len(self.gpu_gauges))

    def labels(self, config: ClusterConfig, uuids: list[list[str]]) -> list[list[dict[str, str]]]:
        """Per node, the label sets of its series in column order."""
        mount = {
            "export": config.nfs_export,
            "mountaddress": config.nfs_mountaddress,
            "protocol": config.nfs_protocol,
        }
        out = []
        for i, host in enumerate(config.hosts):
            node = {
                "cluster": config.cluster,
                "instance": f"{host}:{config.node_exporter_port}",
                "job": config.node_exporter_job,
            }
            dcgm = {
                "cluster": config.cluster,
                "instance": f"{host}:{config.dcgm_port}",
                "job": config.dcgm_job,
                "Hostname": host,
                "modelName": config.model_name,
            }
            labels = [{**node, "__name__": name} for name in NODE_SCALARS]
            labels += [
                {**node, **mount, "__name__": name, "operation": op}
                for name in NFS_COUNTERS
                for op in NFS_OPERATIONS
            ]
            labels += [{**node, **mount, "__name__": name} for name in NFS_BYTES]
            labels += [
                {**node, "__name__": "node_cpu_seconds_total", "cpu": str(cpu), "mode": mode}
                for cpu in range(self.cpus)
                for mode in CPU_MODES
            ]
            if self.host:
                labels += [{**node, "__name__": name} for name in HOST_GAUGES]
            if self.memory:
                labels += [{**node, "__name__": name} for name in MEMORY_GAUGES]
            labels += [
                {**node, "__name__": name, "device": f"mlx5_{port}", "port": "1"}
                for port in range(self.ports)
                for name in IB_COUNTERS
            ]
            labels += [
                {
                    **dcgm,
                    "__name__": name,
                    "gpu": str(gpu),
                    "UUID": uuids[i][gpu],
                    "pci_bus_id": pci_bus_id(gpu),
                    "device": f"nvidia{gpu}",
                }
                for name in self.gpu_gauges
                for gpu in range(self.gpus)
            ]
            out.append([sorted_labels(lbl) for lbl in labels])
        return out


def trainer_roles(rank: int, members: int, stages: int) -> tuple[str, str]:
    """``(dp_group, pp_stage)`` of the node holding rank ``rank`` of ``members``.

    Ranks fill pipeline stages in order (``ceil(members / stages)`` nodes per
    stage). With tensor parallelism inside a node (its 8 GPUs), the nodes of a
    stage hold the same layers and all-reduce their gradients together: they
    form that stage's data-parallel group, so ``dp_group`` names the stage's
    group and nodes with equal ``dp_group`` are role peers.
    """
    per_stage = -(-members // min(stages, members))
    stage = rank // per_stage
    return str(stage), str(stage)


def trainer_labels(
    config: ClusterConfig, host: str, rank: int, members: int
) -> list[dict[str, str]]:
    """The label sets of a member's two trainer gauges."""
    dp_group, pp_stage = trainer_roles(rank, members, config.pipeline_stages)
    base = {
        "cluster": config.cluster,
        "instance": f"{host}:{config.trainer_port}",
        "job": config.trainer_job,
        "dp_group": dp_group,
        "pp_stage": pp_stage,
    }
    if config.job_label and config.job_label_on == "all":
        base[config.job_label] = config.job_name
    return [sorted_labels({**base, "__name__": name}) for name in TRAINER_GAUGES]
