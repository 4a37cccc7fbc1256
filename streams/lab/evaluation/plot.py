"""``--plot FILE.png``: a per-node score heatmap over time with ground-truth markers.

Rows are nodes, columns buckets, colour the node's score in that bucket (the
caller's choice: e.g. ``BucketResult.verdicts[node].score``, the fused peer
score); NaN (no score: silent, not a member) is drawn grey. On top:

* ground-truth onset of each fault on its node's row (white triangle),
* its XID (red cross), its end (white bar) when within the plot,
* node alerts as they first fire (black dot), when ``alerts`` are given,
* must-not-page cluster events (checkpoint saves, restart loads, ...) as
  shaded spans on a thin strip above the heatmap.

Long runs are max-pooled to at most ``max_columns`` columns, so a one-bucket
spike stays visible in a week-long plot. matplotlib is imported lazily (it is
only needed for the plot) and drawn through its Agg canvas: no pyplot state,
no display.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from detectors.arrays import FloatArray, IntArray
from detectors.episodes import alert_episodes, to_alert_event
from detectors.features import DEFAULT_BUCKET_MS
from streams.lab.simulator.faults import GroundTruth

__all__ = ["plot_score_heatmap", "score_matrix"]

_EVENT_COLOURS = {
    "checkpoint_save": "tab:blue",
    "restart_load": "tab:orange",
    "job_death": "tab:red",
    "spare_joined": "tab:green",
}


def score_matrix(
    scores: Iterable[tuple[int, str, float]],
    *,
    bucket_ms: int = DEFAULT_BUCKET_MS,
    nodes: Sequence[str] | None = None,
) -> tuple[list[str], IntArray, FloatArray]:
    """``(bucket_ts, node, score)`` triples → ``(nodes, bucket_ts, matrix)`` on a full grid.

    ``bucket_ts`` runs from the first to the last bucket seen, every
    ``bucket_ms``; ``matrix[i, j]`` is node ``i``'s score in bucket ``j``, NaN
    where none was given. ``nodes`` fixes the row order (default: sorted names
    seen); a triple for a node outside it is ignored. A later triple for the
    same cell wins.
    """
    if bucket_ms <= 0:
        raise ValueError(f"bucket_ms must be > 0, got {bucket_ms}")
    triples = list(scores)
    names = sorted({n for _, n, _ in triples}) if nodes is None else list(nodes)
    if not triples:
        return names, np.zeros(0, dtype=np.int64), np.full((len(names), 0), np.nan)
    ts = np.array([t - t % bucket_ms for t, _, _ in triples], dtype=np.int64)
    first, last = int(ts.min()), int(ts.max())
    grid = np.arange(first, last + bucket_ms, bucket_ms, dtype=np.int64)
    matrix = np.full((len(names), len(grid)), np.nan)
    row = {n: i for i, n in enumerate(names)}
    for (_, node, value), t in zip(triples, ts, strict=True):
        i = row.get(node)
        if i is not None:
            matrix[i, (int(t) - first) // bucket_ms] = value
    return names, grid, matrix


def _max_pool(matrix: FloatArray, factor: int) -> FloatArray:
    """Max over blocks of ``factor`` columns, ignoring NaN (all-NaN blocks stay NaN)."""
    if factor <= 1:
        return matrix
    n, m = matrix.shape
    pad = (-m) % factor
    filled = np.where(np.isnan(matrix), -np.inf, matrix)
    if pad:
        filled = np.concatenate([filled, np.full((n, pad), -np.inf)], axis=1)
    pooled = filled.reshape(n, -1, factor).max(axis=2)
    return np.where(np.isneginf(pooled), np.nan, pooled)


def plot_score_heatmap(
    path: str | Path,
    nodes: Sequence[str],
    bucket_ts: npt.ArrayLike,
    scores: npt.ArrayLike,
    truth: Iterable[GroundTruth] = (),
    alerts: Iterable[Any] = (),
    *,
    bucket_ms: int = DEFAULT_BUCKET_MS,
    title: str | None = None,
    vmax: float | None = None,
    max_columns: int = 2000,
) -> Path:
    """Write the heatmap PNG to ``path`` and return it.

    ``nodes``: row labels (len N). ``bucket_ts``: bucket starts in ms, ascending
    and evenly ``bucket_ms`` apart (len M; :func:`score_matrix` builds such a
    grid). ``scores``: N x M floats, NaN = no score. ``truth``: ground-truth
    rows (faults are marked on their node's row if it is plotted; cluster
    events go on the strip above). ``alerts``: alert transitions in any form
    :func:`detectors.episodes.to_alert_event` reads. ``vmax``: top of
    the colour scale (default: the largest finite score).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    ts = np.asarray(bucket_ts, dtype=np.int64)
    matrix = np.asarray(scores, dtype=np.float64)
    if matrix.shape != (len(nodes), len(ts)):
        raise ValueError(f"scores must be {len(nodes)} x {len(ts)}, got {matrix.shape}")
    if len(ts) == 0 or not nodes:
        raise ValueError("nothing to plot: no nodes or no buckets")
    if len(ts) > 1 and np.any(np.diff(ts) != bucket_ms):
        raise ValueError(f"bucket_ts must be evenly {bucket_ms} ms apart (see score_matrix)")
    if max_columns < 1:
        raise ValueError(f"max_columns must be >= 1, got {max_columns}")

    t0 = int(ts[0])
    hours = bucket_ms / 3_600_000.0
    span_h = len(ts) * hours

    def x(t_ms: int) -> float:
        return (t_ms - t0) / 3_600_000.0

    factor = -(-len(ts) // max_columns)
    shown = _max_pool(matrix, factor)
    finite = matrix[np.isfinite(matrix)]
    top = vmax if vmax is not None else (float(finite.max()) if finite.size else 1.0)
    top = top if top > 0 else 1.0

    height = min(max(3.0, 0.14 * len(nodes) + 1.8), 16.0)
    fig = Figure(figsize=(13.0, height), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(
        2, 2, height_ratios=(1, max(len(nodes) / 4.0, 4.0)), width_ratios=(60, 1)
    )
    strip = fig.add_subplot(grid[0, 0])
    ax = fig.add_subplot(grid[1, 0], sharex=strip)
    cax = fig.add_subplot(grid[1, 1])

    cmap = _colormap()
    image = ax.imshow(
        np.ma.masked_invalid(shown),
        aspect="auto",
        interpolation="nearest",
        origin="upper",
        extent=(0.0, span_h, len(nodes) - 0.5, -0.5),
        cmap=cmap,
        vmin=0.0,
        vmax=top,
    )
    fig.colorbar(image, cax=cax, label="node score")
    ax.set_yticks(range(len(nodes)))
    ax.set_yticklabels(nodes, fontsize=max(4.0, min(8.0, 400.0 / max(len(nodes), 1))))
    since = datetime.fromtimestamp(t0 / 1000.0, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    ax.set_xlabel(f"hours since {since} (bucket {bucket_ms / 1000:g} s)")
    ax.set_xlim(0.0, span_h)

    row = {n: i for i, n in enumerate(nodes)}
    seen: set[str] = set()

    def mark(label: str, t_ms: int, node_row: int, **style: Any) -> None:
        if 0.0 <= x(t_ms) <= span_h:
            ax.plot(
                [x(t_ms)],
                [node_row],
                linestyle="none",
                label=None if label in seen else label,
                **style,
            )
            seen.add(label)

    strip.set_yticks([])
    strip.set_ylim(0.0, 1.0)
    strip.set_ylabel("events", rotation=0, ha="right", va="center", fontsize=8)
    strip.tick_params(labelbottom=False)
    strip_seen: set[str] = set()
    for t in truth:
        if t.node is None or t.node not in row:
            if t.is_fault:
                continue  # a fault on a node that is not plotted
            end = t.end_ms if t.end_ms is not None else t.onset_ms + bucket_ms
            colour = _EVENT_COLOURS.get(t.kind, "tab:purple")
            strip.axvspan(
                x(t.onset_ms),
                max(x(end), x(t.onset_ms) + hours),
                color=colour,
                alpha=0.6,
                label=None if t.kind in strip_seen else t.kind,
            )
            strip_seen.add(t.kind)
            continue
        i = row[t.node]
        if 0.0 <= x(t.onset_ms) <= span_h:
            ax.annotate(
                t.kind,
                (x(t.onset_ms), i),
                xytext=(6, -6),
                textcoords="offset points",
                fontsize=6,
                color="white",
                bbox={"boxstyle": "round,pad=0.15", "fc": "black", "alpha": 0.5, "lw": 0},
            )
        mark(
            "onset (fault)" if t.is_fault else "onset (must not page)",
            t.onset_ms,
            i,
            marker=">",
            color="white",
            markeredgecolor="black",
            markersize=8,
            zorder=4,
        )
        if t.xid_ms is not None:
            mark(
                "XID",
                t.xid_ms,
                i,
                marker="X",
                color="red",
                markeredgecolor="white",
                markersize=9,
                zorder=5,
            )
        if t.end_ms is not None:
            mark("end", t.end_ms, i, marker="|", color="white", markersize=12, markeredgewidth=2)
    events = [to_alert_event(a) for a in alerts]
    for ep in alert_episodes(events, merge_ms=0):
        if ep.node in row:
            for firing in ep.firings:
                mark(
                    "alert fired",
                    firing.ts,
                    row[ep.node],
                    marker="o",
                    color="cyan",
                    markeredgecolor="black",
                    markersize=5,
                    zorder=3,
                )
    if seen or strip_seen:
        handles, labels = ax.get_legend_handles_labels()
        more, more_labels = strip.get_legend_handles_labels()
        fig.legend(
            handles + more,
            labels + more_labels,
            loc="outside lower center",
            ncol=min(len(labels) + len(more_labels), 5),
            fontsize=7,
        )
    strip.set_title(title or f"node scores, {len(nodes)} nodes x {len(ts)} buckets", fontsize=10)

    out = Path(path)
    fig.savefig(out, dpi=110)
    return out


def _colormap() -> Any:
    from matplotlib import colormaps

    return colormaps["magma"].with_extremes(bad="#bbbbbb")
