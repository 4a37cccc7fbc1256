"""A seeded synthetic GPU cluster that answers scrapes the way its exporters would.

Every node runs node_exporter (``<host>:9100``: interrupts, processes, vmstat,
NFS mountstats; optionally CPU time, load, memory, InfiniBand ports) and
dcgm-exporter (``<host>:9400``: per-GPU utilisation, power, temperature, last
XID; optionally SM activity and clock, clock event reasons, HBM temperature,
remapped rows); the job's members also serve the trainer's own gauges
(``<host>:9500``, optional). ``ClusterSimulator.scrape(t_ms)`` returns one
scrape round of all of them as raw Prometheus series, so the simulated data
goes through the same remote_write ingest as real data:

- counters are cumulative (they start at a random "uptime" value) and only
  restart at an explicit reboot;
- every target is scraped at its own fixed offset within the interval plus a
  few ms of jitter, and every sample carries ``instance``, ``job`` and
  ``cluster`` labels like a real scrape (``fleet`` has the shapes real fleets
  add: job labels on some exporters only, offsets spread over the whole
  interval, HA replica pairs, role labels);
- nodes differ persistently (offsets per node and GPU) and noisily (per scrape).

What the nodes do comes from the job's plan (``timeline.plan_job``: training
with synchronised checkpoint saves, death, restart on a spare, load), from
``activity`` (the values of each phase) and from the config's faults. The
numbers are in ``calibration.Calibration``; the series layout in ``layout``.

Speed: each round is a handful of numpy operations per metric family on
(nodes,) or (nodes, gpus) arrays. ``scrape_batch(t_ms)`` hands the round over
in columns (a ``SampleBatch``, as the compiled remote_write decoder does), which
``FrameBuilder.add_batch`` reads without a ``Series`` per sample: building,
collecting and freeing those (~0.4 us each) was most of a round's cost.
``scrape`` makes the ``Series`` from the same columns. Label dicts are built
once and shared by every round: treat them as read-only (the ingest decoder has
the same contract).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from streams.gc_pause import gc_paused
from streams.ingest.series import SampleBatch, Series
from streams.lab.simulator.activity import (
    ExtraNoise,
    Noise,
    Phase,
    baseline,
    iteration_time_s,
    settle,
)
from streams.lab.simulator.config import ClusterConfig
from streams.lab.simulator.fleet import (
    job_labelled,
    label_vanishes_from_ms,
    node_roles,
    replica_jitter,
    scrape_offsets,
    with_replica,
)
from streams.lab.simulator.layout import (
    BASE_NODE_COLUMNS,
    SeriesLayout,
    pci_bus_id,
    trainer_labels,
)
from streams.lab.simulator.state import TRAINER, RoundState
from streams.lab.simulator.timeline import JobPlan, plan_job
from streams.lab.simulator.traits import shaped_traits

__all__ = ["ClusterSimulator", "pci_bus_id"]

# Seed-sequence keys that keep the simulator's per-round random streams apart.
_ROUND_STREAM = 2
_EXTRA_ROUND_STREAM = 4


# Part of a round in columns: label sets, sample times (ms), values; each a list or an array.
_Columns = tuple[list[dict[str, str]], "np.ndarray | list[int]", "np.ndarray | list[float]"]


def _batch(parts: list[_Columns]) -> SampleBatch:
    """The parts of a round, in order, as one ``SampleBatch``."""
    parts = [p for p in parts if len(p[0])]
    stamps = [np.asarray(p[1], dtype=np.int64).ravel() for p in parts]
    values = [np.asarray(p[2], dtype=np.float64).ravel() for p in parts]
    return SampleBatch(
        [lbl for part in parts for lbl in part[0]],
        np.concatenate(stamps) if stamps else np.empty(0, dtype=np.int64),
        np.concatenate(values) if values else np.empty(0),
    )


class ClusterSimulator:
    """Answers scrape rounds for a ``ClusterConfig``; deterministic for a given seed.

    Rounds must be requested in increasing order on the config's grid; the
    values of round ``t_ms`` depend only on the seed and ``t_ms`` (each round
    has its own random stream), except counters and temperatures, which carry
    state from the rounds computed before. A late scrape's samples are held back
    and delivered with a later round.
    """

    def __init__(self, config: ClusterConfig, *, replica: int = 0):
        self.config = config
        self.plan: JobPlan = plan_job(config)
        self.hosts = config.hosts
        n, g = len(self.hosts), config.gpus_per_node
        self.traits = shaped_traits(config)
        self.layout = SeriesLayout(config)
        # An HA pair: this simulator is replica 0 and drives one mirror per further
        # replica; the mirrors compute the same rounds (same streams) but scrape at
        # their own offsets and jitter, so only their counters' read times differ.
        self._replica = replica
        self._offset_ms = scrape_offsets(config, self.traits.offset_ms, replica)
        self._mirrors = (
            [ClusterSimulator(config, replica=i) for i in range(1, len(config.replicas))]
            if replica == 0
            else []
        )
        self._labels = [
            [with_replica(lbl, config, replica) for lbl in node]
            for node in self.layout.labels(config, self.traits.uuids)
        ]
        self._job_label_sets: dict[tuple[int, str], list[dict[str, str]]] = {}
        self._vanish_from = [label_vanishes_from_ms(config, e) for e in self.plan.epochs]
        self._faults = [
            (f, None if f.node is None else self.hosts.index(f.node)) for f in config.faults
        ]
        self._member_masks: dict[int, np.ndarray] = {}
        self._flat_labels: dict[tuple[int, bool], tuple[list[dict[str, str]], np.ndarray]] = {}
        self._trainer_labels: dict[int, dict[int, list[dict[str, str]]]] = {}
        start = self.traits.counters_start
        self._intr = start["intr"].copy()
        self._pgpgout = start["pgpgout"].copy()
        self._nfs_requests = start["nfs_requests"].copy()
        mean_request_s = np.array([0.003, 0.05, 0.5])  # uptime's mix of quiet and busy periods
        self._nfs_response = (self._nfs_requests * mean_request_s * 0.4).round(3)
        self._nfs_queue = (self._nfs_requests * mean_request_s * 0.6).round(3)
        self._read_bytes = start["read_bytes"].copy()
        self._write_bytes = start["write_bytes"].copy()
        self._cpu_seconds = start["cpu_seconds"].copy()
        self._context_switches = start["context_switches"].copy()
        self._ib = start["ib"].copy()
        self._load1: np.ndarray | None = None
        self._xid = np.zeros((n, g))
        self._temp: np.ndarray | None = None
        self._temp_reported = np.zeros((n, g))
        self._mem_temp_reported = np.zeros((n, g))
        self._iteration_s = 0.0
        self._prev_t: int | None = None
        self._prev_ts: np.ndarray | None = None  # (nodes, targets) last sample time
        # what the previous round emitted, for stale markers
        self._prev_keep: np.ndarray | None = None
        self._prev_flat: np.ndarray | None = None
        self._prev_trainer: dict[int, list[dict[str, str]]] = {}
        self._current_trainer: dict[int, list[dict[str, str]]] = {}
        self._held: list[tuple[int, _Columns]] = []  # (release round, late samples)

    # --- public ---------------------------------------------------------------------------

    def scrape(self, t_ms: int) -> list[Series]:
        """Every series that reaches the receiver in the scrape round starting at ``t_ms``."""
        batch = self.scrape_batch(t_ms)
        with gc_paused():
            return batch.series()

    def scrape_batch(self, t_ms: int) -> SampleBatch:
        """``scrape`` in columns: the same samples in the same order, no ``Series`` made."""
        return _batch(self._scrape_parts(t_ms))

    def _scrape_parts(self, t_ms: int) -> list[_Columns]:
        state, ts = self._step(t_ms)
        parts = self._parts(state, ts)
        for mirror in self._anchored_mirrors(ts):
            parts.extend(mirror._scrape_parts(t_ms))
        return parts

    def advance(self, t_ms: int) -> None:
        """Compute the round at ``t_ms`` without building series (to fast-forward)."""
        _, ts = self._step(t_ms)
        self._prev_keep = None
        self._prev_trainer = {}
        for mirror in self._anchored_mirrors(ts):
            mirror.advance(t_ms)

    def _anchored_mirrors(self, ts: np.ndarray) -> list[ClusterSimulator]:
        """The mirrors, each starting its counters from this replica's first reading.

        Both replicas read the same counters: a mirror's first round integrates
        from this replica's first sample times to its own, so its values differ
        by what the counters gained in between, not by a constant.
        """
        for mirror in self._mirrors:
            if mirror._prev_ts is None:
                mirror._prev_ts = ts.copy()
        return self._mirrors

    @property
    def iteration_time_s(self) -> float:
        """The trainer's last reported iteration time (0 before the first training round)."""
        return self._iteration_s

    # --- one round ------------------------------------------------------------------------

    def _member_mask(self, epoch_index: int) -> np.ndarray:
        mask = self._member_masks.get(epoch_index)
        if mask is None:
            mask = np.zeros(len(self.hosts), dtype=bool)
            mask[list(self.plan.epochs[epoch_index].members)] = True
            self._member_masks[epoch_index] = mask
        return mask

    def _allocated(self, t_ms: int) -> np.ndarray:
        """Nodes of the job's latest epoch (still allocated while the job is down)."""
        try:
            return self._member_mask(self.plan.epoch_at(t_ms).index)
        except ValueError:
            return np.zeros(len(self.hosts), dtype=bool)

    def _phase(self, t_ms: int) -> Phase:
        n = len(self.hosts)
        allocated = self._allocated(t_ms)
        epoch = self.plan.running_at(t_ms)
        if epoch is None:
            return Phase(np.zeros(n, dtype=bool), allocated, False, 0.0, 0.0)
        member = self._member_mask(epoch.index)
        if t_ms < epoch.train_ms:
            return Phase(member, allocated, True, 0.0, 0.0)
        interval = self.config.interval_ms
        overlap = self.plan.save_overlap(epoch, t_ms, t_ms + interval)
        return Phase(member, allocated, False, overlap.stalled_ms / interval, overlap.save_share)

    def _step(self, t_ms: int) -> tuple[RoundState, np.ndarray]:
        cfg = self.config
        interval = cfg.interval_ms
        if t_ms < cfg.start_ms or (t_ms - cfg.start_ms) % interval:
            raise ValueError(f"t_ms={t_ms} is not on the scrape grid from {cfg.start_ms}")
        if self._prev_t is not None and t_ms <= self._prev_t:
            raise ValueError(f"rounds must move forward: {t_ms} after {self._prev_t}")
        n, g = len(self.hosts), cfg.gpus_per_node
        k = (t_ms - cfg.start_ms) // interval
        rng = np.random.default_rng((cfg.seed, _ROUND_STREAM, k))
        # all of the round's baseline noise, drawn in a fixed order whatever the phase
        noise = Noise(
            z=rng.standard_normal((n, 7)),
            zg=rng.standard_normal((n, g, 3)),
            u=rng.random(n),
            ug=rng.random((n, g, 2)),
        )
        jitter = rng.integers(-cfg.scrape_jitter_ms, cfg.scrape_jitter_ms + 1, size=(n, 2))
        extra = ExtraNoise.draw(
            np.random.default_rng((cfg.seed, _EXTRA_ROUND_STREAM, k))
            if cfg.metric_families
            else None,
            cfg,
        )
        ts = t_ms + self._offset_ms
        if self._replica == 0:
            ts[:, :2] += jitter
            ts[:, 2] += extra.jitter
        else:
            ts += replica_jitter(cfg, self._replica, k, n)

        phase = self._phase(t_ms)
        state = RoundState(
            t_ms=t_ms,
            prev_t_ms=self._prev_t,
            origin_ms=cfg.start_ms,
            interval_ms=interval,
            rng=rng,
            **baseline(cfg, self.traits, phase, noise, extra),  # type: ignore[arg-type]
            xid=self._xid,
            idle_gpu_power_w=self.traits.power_idle,
            idle_gpu_temp_c=self.traits.temp_idle,
            silent=np.zeros(n, dtype=bool),
            target_silent=np.zeros((n, 3), dtype=bool),
            gpu_gone=np.zeros((n, g), dtype=bool),
            reboot=np.zeros(n, dtype=bool),
            delay_rounds=np.zeros(n, dtype=np.int64),
            ts_shift_ms=np.zeros(n, dtype=np.int64),
        )
        for fault, node in self._faults:
            fault.apply(state, node)
        settle(state, cfg)
        if state.training:
            self._iteration_s = iteration_time_s(state, self.traits, phase, extra, cfg)
        self._integrate(state, ts, noise.zg[:, :, 2], extra)
        self._prev_t = t_ms
        return state, ts

    def _integrate(
        self, state: RoundState, ts: np.ndarray, temp_noise: np.ndarray, extra: ExtraNoise
    ) -> None:
        """Advance counters, load and temperatures to this round's sample times."""
        cal, interval_s = self.config.calibration, self.config.interval_ms / 1000.0
        # the first round reports the starting values
        dt = np.zeros(ts.shape) if self._prev_ts is None else (ts - self._prev_ts) / 1000.0
        self._prev_ts = ts
        reboot = state.reboot
        if reboot.any():
            for counter in (
                self._intr,
                self._pgpgout,
                self._read_bytes,
                self._write_bytes,
                self._nfs_requests,
                self._nfs_response,
                self._nfs_queue,
                self._cpu_seconds,
                self._context_switches,
                self._ib,
            ):
                counter[reboot] = 0.0
            dt[reboot] = np.minimum(dt[reboot], interval_s)  # up for less than a round
        dt_node = dt[:, 0]
        self._intr += np.rint(state.intr_per_s * dt_node)
        self._pgpgout += np.rint(state.pgpgout_per_s * dt_node)
        new_requests = np.rint(state.nfs_requests_per_s * dt_node[:, None])
        self._nfs_requests += new_requests
        self._nfs_response += new_requests * state.nfs_response_s
        self._nfs_queue += new_requests * state.nfs_queue_s
        self._read_bytes += np.rint(state.nfs_read_bytes_per_s * dt_node)
        self._write_bytes += np.rint(state.nfs_write_bytes_per_s * dt_node)

        if self.layout.host:
            self._integrate_host(state, dt_node, extra)
        if self.layout.ports:
            rates = np.stack(
                (state.ib_xmit_wait_per_s, state.ib_tx_bytes_per_s, state.ib_rx_bytes_per_s),
                axis=2,
            )
            self._ib += np.rint(rates * dt_node[:, None, None])

        target = state.gpu_temp_target_c
        if self._temp is None:
            self._temp = target.copy()
        else:
            alpha = 1.0 - np.exp(-dt[:, 1] / cal.gpu_temp_time_constant_s)
            self._temp += alpha[:, None] * (target - self._temp)
        self._temp_reported = np.rint(self._temp + cal.gpu_temp_noise_c * temp_noise)
        if self.layout.gpu_perf:
            self._mem_temp_reported = np.rint(
                self._temp + state.mem_temp_offset_c + cal.mem_temp_noise_c * extra.zg[:, :, 2]
            )

    def _integrate_host(self, state: RoundState, dt_node: np.ndarray, extra: ExtraNoise) -> None:
        """CPU time per CPU and mode, context switches, and the 1-min load average."""
        cal = self.config.calibration
        # the node's shares (idle, iowait, system, user), scattered over its CPUs
        shares = np.stack((state.cpu_iowait, state.cpu_system, state.cpu_user), axis=1)
        per_cpu = np.maximum(shares[:, None, :] * (1.0 + cal.cpu_noise * extra.zc), 0.0)
        busy = per_cpu.sum(axis=2, keepdims=True)
        per_cpu /= np.maximum(busy, 1.0)
        self._cpu_seconds[:, :, 0] += (1.0 - per_cpu.sum(axis=2)) * dt_node[:, None]
        self._cpu_seconds[:, :, 1:] += per_cpu * dt_node[:, None, None]
        self._context_switches += np.rint(state.context_switches_per_s * dt_node)
        runnable = state.procs_running + state.procs_blocked
        if self._load1 is None:
            self._load1 = runnable.astype(float)
        else:
            self._load1 += (1.0 - np.exp(-dt_node / cal.load_time_constant_s)) * (
                runnable - self._load1
            )

    # --- series ---------------------------------------------------------------------------

    def _labels_for(self, t_ms: int) -> tuple[list[dict[str, str]], np.ndarray]:
        """Every (node, column) label set in row-major order, as a list and an object array."""
        try:
            epoch = self.plan.epoch_at(t_ms)
        except ValueError:
            epoch = None
        index = -1 if epoch is None else epoch.index
        vanish = None if epoch is None else self._vanish_from[index]
        vanished = vanish is not None and t_ms >= vanish
        cached = self._flat_labels.get((index, vanished))
        if cached is None:
            labelled = epoch is not None and self.config.job_label is not None and not vanished
            roles = node_roles(self.config, epoch) if labelled and epoch is not None else {}
            flat = [
                lbl
                for i in range(len(self.hosts))
                for lbl in (self._job_labels_of(i, roles[i]) if i in roles else self._labels[i])
            ]
            array = np.empty(len(flat), dtype=object)
            array[:] = flat
            cached = self._flat_labels[(index, vanished)] = (flat, array)
        return cached

    def _job_labels_of(self, node: int, role: str) -> list[dict[str, str]]:
        """Node ``node``'s label sets while allocated to the job (built once per role)."""
        key = (node, role if self.config.role_label else "")
        labels = self._job_label_sets.get(key)
        if labels is None:
            labels = self._job_label_sets[key] = job_labelled(
                self.config, self._labels[node], self.layout.col_target, role
            )
        return labels

    def _values(self, state: RoundState) -> np.ndarray:
        n, lay = len(self.hosts), self.layout
        values = np.empty((n, lay.columns))
        node = values[:, :BASE_NODE_COLUMNS]
        node[:, 0] = self._intr
        node[:, 1] = state.procs_running
        node[:, 2] = self._pgpgout
        node[:, 3:6] = self._nfs_requests
        node[:, 6:9] = self._nfs_response.round(6)
        node[:, 9:12] = self._nfs_queue.round(6)
        node[:, 12] = self._read_bytes
        node[:, 13] = self._write_bytes
        if lay.cpus:
            values[:, lay.cpu_cols] = self._cpu_seconds[:, : lay.cpus].reshape(n, -1).round(2)
        if lay.host:
            host = values[:, lay.host_cols]
            host[:, 0] = np.round(self._load1, 2) if self._load1 is not None else np.nan
            host[:, 1] = state.procs_blocked
            host[:, 2] = self._context_switches
        if lay.memory:
            memory = values[:, lay.memory_cols]
            memory[:, 0] = np.rint(state.shmem_bytes / 4096.0) * 4096.0
            memory[:, 1] = np.rint(state.mem_available_bytes / 4096.0) * 4096.0
        if lay.ports:
            values[:, lay.ib_cols] = self._ib[:, : lay.ports].reshape(n, -1)
        gpu = np.empty((n, len(lay.gpu_gauges), lay.gpus))
        gpu[:, 0] = np.clip(np.rint(state.gpu_util), 0.0, 100.0)
        gpu[:, 1] = state.gpu_power_w.round(3)
        gpu[:, 2] = self._temp_reported
        gpu[:, 3] = state.xid
        at = 4
        if lay.gpu_perf:
            gpu[:, 4] = np.clip(state.sm_active, 0.0, 1.0).round(4)
            gpu[:, 5] = np.rint(state.sm_clock_mhz)
            gpu[:, 6] = state.clock_reasons
            gpu[:, 7] = self._mem_temp_reported
            at = 8
        if lay.row_remap:
            gpu[:, at] = state.remap_correctable
            gpu[:, at + 1] = state.remap_uncorrectable
            gpu[:, at + 2] = state.remap_failure
            gpu[:, at + 3] = state.remap_pending
        values[:, lay.gpu_cols] = gpu.reshape(n, -1)
        return values

    def _parts(self, state: RoundState, ts: np.ndarray) -> list[_Columns]:
        cfg, lay = self.config, self.layout
        n = len(self.hosts)
        values = self._values(state)
        shift = np.minimum(state.ts_shift_ms, cfg.interval_ms - 2 * cfg.scrape_jitter_ms - 2)
        stamps = ts[:, lay.col_target]
        if shift.any():
            stamps = stamps + shift[:, None]
        flat, flat_array = self._labels_for(state.t_ms)
        keep: np.ndarray | None = None
        if state.silent.any() or state.target_silent[:, :2].any() or state.gpu_gone.any():
            keep = ~state.silent[:, None] & ~state.target_silent[:, lay.col_target]
            if state.gpu_gone.any():
                gone = np.concatenate((state.gpu_gone, np.zeros((n, 1), dtype=bool)), axis=1)
                keep &= ~gone[:, lay.col_gpu]
        late = state.delay_rounds > 0
        out: list[_Columns] = []
        if keep is None and not late.any():
            out.append((flat, stamps.ravel(), values.ravel()))
        else:
            sent = np.ones(values.shape, dtype=bool) if keep is None else keep
            for rows, delay in self._delivery_groups(sent, state.delay_rounds):
                labels = flat_array.reshape(values.shape)[rows].tolist()
                chunk = (labels, stamps[rows], values[rows])
                if delay == 0:
                    out.append(chunk)
                else:
                    self._held.append((state.t_ms + delay * cfg.interval_ms, chunk))
        out.append(self._trainer_columns(state, ts, shift))
        if cfg.emit_stale_markers:
            out.append(self._stale_markers(keep, flat_array, state, ts))
        if self._held:
            out.extend(chunk for at, chunk in self._held if at <= state.t_ms)
            self._held = [(at, chunk) for at, chunk in self._held if at > state.t_ms]
        return out

    @staticmethod
    def _delivery_groups(
        sent: np.ndarray, delay_rounds: np.ndarray
    ) -> Iterator[tuple[np.ndarray, int]]:
        """Masks of the (node, column) cells delivered now (delay 0) and per delay."""
        rows = delay_rounds[:, None]
        yield sent & (rows == 0), 0
        for delay in np.unique(delay_rounds[delay_rounds > 0]).tolist():
            yield sent & (rows == delay), int(delay)

    def _trainer_columns(self, state: RoundState, ts: np.ndarray, shift: np.ndarray) -> _Columns:
        self._current_trainer = {}
        out_labels: list[dict[str, str]] = []
        out_stamps: list[int] = []
        out_values: list[float] = []
        if not self.layout.trainer or not state.training:
            return out_labels, out_stamps, out_values
        epoch = self.plan.epoch_at(state.t_ms)
        labels = self._trainer_labels.get(epoch.index)
        if labels is None:
            members = len(epoch.members)
            labels = self._trainer_labels[epoch.index] = {
                node: [
                    with_replica(lbl, self.config, self._replica)
                    for lbl in trainer_labels(self.config, self.hosts[node], rank, members)
                ]
                for rank, node in enumerate(epoch.members)
            }
        up = state.member & ~state.silent & ~state.target_silent[:, TRAINER]
        iteration = round(self._iteration_s, 4)
        tokens = round(self.config.calibration.tokens_per_iteration / self._iteration_s, 1)
        for node in np.flatnonzero(up).tolist():
            at = int(ts[node, TRAINER] + shift[node])
            pair: _Columns = (list(labels[node]), [at, at], [iteration, tokens])
            delay = int(state.delay_rounds[node])
            if delay:
                self._held.append((state.t_ms + delay * self.config.interval_ms, pair))
            else:
                out_labels += labels[node]
                out_stamps += [at, at]
                out_values += [iteration, tokens]
            self._current_trainer[node] = labels[node]
        return out_labels, out_stamps, out_values

    def _stale_markers(
        self, keep: np.ndarray | None, flat_array: np.ndarray, state: RoundState, ts: np.ndarray
    ) -> _Columns:
        """Stale markers for every series that the previous round emitted and this one does not."""
        from streams.ingest.remote_write import STALE_NAN

        lay = self.layout
        labels: list[dict[str, str]] = []
        stamps: list[int] = []
        if self._prev_keep is not None and keep is not None:
            dropped = self._prev_keep & ~keep
            if dropped.any() and self._prev_flat is not None:
                nodes, cols = np.nonzero(dropped)
                labels = self._prev_flat.reshape(dropped.shape)[nodes, cols].tolist()
                stamps = ts[nodes, lay.col_target[cols]].tolist()
        self._prev_keep = (
            np.ones((len(self.hosts), lay.columns), dtype=bool) if keep is None else keep
        )
        self._prev_flat = flat_array
        for node, trainer in self._prev_trainer.items():
            if node not in self._current_trainer:
                labels.extend(trainer)
                stamps.extend([int(ts[node, TRAINER])] * len(trainer))
        self._prev_trainer = self._current_trainer
        return labels, stamps, [STALE_NAN] * len(labels)
