"""The backtest's summary (:mod:`streams.backtest.summary`) as ONE self-contained HTML file.

Everything is inline: the CSS, and the plots as PNG ``data:`` URIs drawn with
matplotlib's Agg canvas (no pyplot state, no display), so the file opens
offline and can be mailed. No script, no external URL. Every piece of text
from the fleet (node, group, alert and event names, advice) is HTML-escaped,
and ``$`` is escaped in plot labels (matplotlib would read it as mathtext).

Sections: the headline and lead time per known event; per group, the node-score
heatmap (max fused peer score per node and column) with known events and XID
alerts marked, and the alert timeline; false alerts per day; fail-slow
episodes; advice. matplotlib is the ``plot`` extra: :class:`ReportError` says
so when it is missing.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from detectors.errors import PeerwatchError

__all__ = ["ReportError", "render_html"]

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;
color:#1d1d1f;max-width:1280px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:18px 0 6px}.muted{color:#666;font-size:13px}
.headline{font-size:20px;font-weight:600;margin:12px 0}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f6}td.num{text-align:right;font-variant-numeric:tabular-nums}
.yes{color:#0a7d28;font-weight:600}.no{color:#b3261e;font-weight:600}
img{max-width:100%;height:auto;display:block;margin:6px 0}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin:10px 0}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:150px}
.card b{display:block;font-size:20px}
"""
_MAX_TABLE_ROWS = 300
_MAX_TIMELINE_ROWS = 60
_ALERT_COLOURS = (
    "tab:red",
    "tab:orange",
    "tab:blue",
    "tab:green",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:gray",
)


class ReportError(PeerwatchError):
    """The report cannot be drawn (matplotlib missing); the message says what to install."""


def render_html(result: Mapping[str, Any]) -> str:
    """The summary ``result`` (``Accumulator.result()``) as one HTML document."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ReportError(
            "the backtest's HTML report draws with matplotlib: pip install 'peerwatch[plot]'"
        ) from None
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>peerwatch backtest</title>",
        f"<style>{_CSS}</style></head><body>",
        *_header(result),
        *_lead_time(result),
        *_groups(result),
        *_false_alerts(result),
        *_failslow(result),
        *_advice(result),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


# ---- text helpers


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _when(ts_ms: int | None) -> str:
    if ts_ms is None:
        return ""
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    sign, s = ("-" if seconds < 0 else ""), abs(seconds)
    if s < 120:
        return f"{sign}{s:g} s"
    if s < 7200:
        return f"{sign}{s / 60:.1f} min"
    return f"{sign}{s / 3600:.1f} h"


def _num(x: float | None, digits: int = 2) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _yes(flag: bool) -> str:
    return '<span class="yes">yes</span>' if flag else '<span class="no">no</span>'


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], numeric: Iterable[int] = ()) -> str:
    """``rows`` hold HTML already escaped; at most ``_MAX_TABLE_ROWS`` are shown."""
    nums = set(numeric)
    rows = list(rows)
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for row in rows[:_MAX_TABLE_ROWS]:
        cells = (
            f'<td class="num">{c}</td>' if i in nums else f"<td>{c}</td>" for i, c in enumerate(row)
        )
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</table>")
    if len(rows) > _MAX_TABLE_ROWS:
        out.append(
            f'<p class="muted">{len(rows) - _MAX_TABLE_ROWS} more rows in the JSON summary.</p>'
        )
    return "\n".join(out)


def _label(text: Any) -> str:
    """Text for a matplotlib label: ``$`` would start mathtext."""
    return str(text).replace("$", r"\$")


# ---- sections


def _header(result: Mapping[str, Any]) -> list[str]:
    lead = result["lead_time"]
    false = result["false_alerts"]
    span = (
        f"{_when(result['start_ms'])} to {_when(result['end_ms'])} UTC"
        if result["start_ms"] is not None
        else "no buckets scored"
    )
    cards = [
        ("known events", str(lead["events"])),
        ("found", f"{lead['found']}/{lead['events']}"),
        ("before the event", f"{lead['before']}/{lead['events']}"),
        ("alerts", str(len(result["alerts"]))),
        ("false alerts / group-day", _num(false["per_group_day"])),
        ("fail-slow episodes", str(len(result["failslow"]))),
    ]
    run = result.get("run") or {}  # the CLI's: where the history came from
    source = " · ".join(
        f"{k} {run[k]}" for k in ("source", "selector") if isinstance(run, Mapping) and run.get(k)
    )
    out = [
        "<h1>peerwatch backtest</h1>",
        f'<p class="muted">{_e(span)} · {result["buckets"]} buckets of '
        f"{result['bucket_ms'] / 1000:g} s · {_plural(len(result['groups']), 'group')}"
        + (f" · {_e(source)}" if source else "")
        + "</p>",
    ]
    if lead["headline"]:
        out.append(f'<p class="headline">{_e(lead["headline"])}</p>')
    out.append(
        '<div class="cards">'
        + "".join(f'<div class="card"><b>{_e(v)}</b>{_e(k)}</div>' for k, v in cards)
        + "</div>"
    )
    return out


def _lead_time(result: Mapping[str, Any]) -> list[str]:
    lead, w = result["lead_time"], result["windows"]
    b = result["bucket_ms"] / 1000
    out = [
        "<h2>Lead time per known event</h2>",
        f'<p class="muted">Found: a node alert on the event\'s node (any alert of its group for '
        f"a group event) fired from {w['lookback_buckets']} buckets "
        f"({_duration(w['lookback_buckets'] * b)}) before the event's bucket to "
        f"{w['tolerance_buckets']} after. Before: it fired in an earlier bucket than the "
        "event's. Lead: the event's bucket minus the first alert's.</p>",
    ]
    if not lead["rows"]:
        out.append('<p class="muted">No known events were given.</p>')
        return out
    if lead["by_kind"]:
        out.append(
            _table(
                ("kind", "events", "found", "before"),
                (
                    (_e(k), str(v["events"]), str(v["found"]), str(v["before"]))
                    for k, v in lead["by_kind"].items()
                ),
                numeric=(1, 2, 3),
            )
        )
    rows = [
        (
            _e(_when(r["ts_ms"])),
            _e(r["node"]),
            _e(r["group"]),
            _e(r["kind"]),
            _yes(r["found"]) if r["in_range"] else '<span class="muted">outside the span</span>',
            _e(r["first_alertname"]),
            _e(_when(r["first_alert_ts"])),
            _e(_duration(r["lead_s"])),
            _yes(r["before"]) if r["found"] else "",
        )
        for r in lead["rows"]
    ]
    head = (
        "event (UTC)",
        "node",
        "group",
        "kind",
        "found",
        "first alert",
        "fired",
        "lead",
        "before",
    )
    out.append(_table(head, rows, numeric=(7,)))
    return out


def _groups(result: Mapping[str, Any]) -> list[str]:
    out = ["<h2>Node scores and alerts per group</h2>"]
    if not result["groups"]:
        out.append('<p class="muted">No group was scored.</p>')
    alerts_by_group: dict[str, list[Mapping[str, Any]]] = {}
    for a in result["alerts"]:
        alerts_by_group.setdefault(a["group"], []).append(a)
    events = result["lead_time"]["rows"]
    for name, g in result["groups"].items():
        heat = g["heatmap"]
        out.append(f"<h3>group {_e(name)}</h3>")
        out.append(
            f'<p class="muted">{len(heat["nodes"])} nodes · {heat["columns"]} columns of '
            f"{_e(_duration(heat['width_ms'] / 1000))} (the max score in each) · "
            f"{_num(g['node_days'], 1)} node-days · "
            f"{len(g['markers'])} markers</p>"
        )
        if heat["columns"]:
            out.append(_img(_heatmap_png(name, heat, g["markers"]), f"node scores of {name}"))
        mine = alerts_by_group.get(name, [])
        if mine:
            marks = [
                e
                for e in events
                if e["in_range"] and (e["group"] == name or e["node"] in set(heat["nodes"]))
            ]
            span = _span(heat, mine, result["bucket_ms"])
            png = _timeline_png(name, mine, marks, span)
            out.append(_img(png, f"alert timeline of {name}"))
            rows = len({(a["node"], a["alertname"]) for a in mine})
            if rows > _MAX_TIMELINE_ROWS:
                out.append(
                    f'<p class="muted">The timeline shows {_MAX_TIMELINE_ROWS} of {rows} '
                    "node and alert rows (by name); the table below and the JSON hold all.</p>"
                )
        else:
            out.append('<p class="muted">No alert fired in this group.</p>')
    out.append("<h3>Alert timeline</h3>")
    if not result["alerts"]:
        out.append('<p class="muted">No alert fired.</p>')
        return out
    out.append(
        _table(
            ("group", "alert", "node", "severity", "fired (UTC)", "resolved (UTC)", "firings"),
            (
                (
                    _e(a["group"]),
                    _e(a["alertname"]),
                    _e(a["node"] or "(group)"),
                    _e(a["severity"]),
                    _e(_when(a["fired_ts"])),
                    _e(_when(a["resolved_ts"]) or "still firing"),
                    str(a["firings"]),
                )
                for a in result["alerts"]
            ),
            numeric=(6,),
        )
    )
    return out


def _span(
    heat: Mapping[str, Any], alerts: Sequence[Mapping[str, Any]], bucket_ms: int
) -> tuple[int, int]:
    """The heatmap's time span, widened to every alert (a group may alert with no scores)."""
    times = [t for a in alerts for t in (a["fired_ts"], a["resolved_ts"]) if t is not None]
    lo, hi = min(times), max(times) + bucket_ms
    if heat["start_ms"] is not None and heat["columns"]:
        lo = min(lo, heat["start_ms"])
        hi = max(hi, heat["start_ms"] + heat["columns"] * heat["width_ms"])
    return lo, hi


def _false_alerts(result: Mapping[str, Any]) -> list[str]:
    false = result["false_alerts"]
    out = [
        "<h2>False alerts</h2>",
        f'<p class="muted">A node alert whose first firing is within no known event\'s window '
        f"on its node ({result['windows']['lookback_buckets']} buckets before it to "
        f"{result['windows']['aftermath_buckets']} after its end). Per group-day: per node-day × "
        f"{false['group_nodes']} (the evaluator's {false['group_nodes']}-node group).</p>",
        f"<p><b>{false['count']}</b> false alerts over {_num(false['group_days'])} group-days: "
        f"<b>{_num(false['per_group_day'])}</b> per group-day.</p>",
    ]
    days: dict[str, int] = {}
    for g in false["by_group"].values():
        for day, n in g["by_day"].items():
            days[day] = days.get(day, 0) + n
    if days:
        out.append(_img(_per_day_png(false["by_group"]), "false alerts per day"))
    out.append(
        _table(
            ("group", "false alerts", "group-days", "per group-day"),
            (
                (_e(name), str(g["count"]), _num(g["group_days"]), _num(g["per_group_day"]))
                for name, g in false["by_group"].items()
            ),
            numeric=(1, 2, 3),
        )
    )
    return out


def _failslow(result: Mapping[str, Any]) -> list[str]:
    rows = result["failslow"]
    out = ["<h2>Fail-slow episodes</h2>"]
    if not rows:
        out.append('<p class="muted">No confirmed slowdown.</p>')
        return out
    out.append(
        _table(
            ("group", "from (UTC)", "to (UTC)", "buckets", "drop", "culprits", "class", "stage"),
            (
                (
                    _e(r["group"]),
                    _e(_when(r["start_ts"])),
                    _e(_when(r["end_ts"]) or "still slow"),
                    str(r["buckets"]),
                    f"{r['max_magnitude'] * 100:.0f} %",
                    _e(", ".join(r["culprits"]) or "none named"),
                    _e(r["klass"]),
                    _e(r["stage"]),
                )
                for r in rows
            ),
            numeric=(3, 4),
        )
    )
    return out


def _advice(result: Mapping[str, Any]) -> list[str]:
    advice = result["advice"]
    out = ["<h2>Advice</h2>"]
    if not advice["items"]:
        out.append('<p class="muted">No advisor said anything.</p>')
        return out
    out.append(
        _table(
            (
                "advisor",
                "advice",
                "group",
                "node(s)",
                "summary",
                "action",
                "first",
                "last",
                "times",
            ),
            (
                (
                    _e(a["advisor"]),
                    _e(a["kind"]),
                    _e(a["group"]),
                    _e(a["node"] or ", ".join(a["nodes"])),
                    _e(a["summary"]),
                    _e(a["action"]),
                    _e(_when(a["first_ts"])),
                    _e(_when(a["last_ts"])),
                    str(a["count"]),
                )
                for a in advice["items"]
            ),
            numeric=(8,),
        )
    )
    return out


# ---- plots


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


# The plots of a group share their axes' left and right edges (fractions of the width), so
# the heatmap's and the timeline's time axes line up one above the other.
_LEFT, _RIGHT = 0.17, 0.86


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _aligned(height: float) -> tuple[Any, Any]:
    """A 12-inch-wide figure with one axes between ``_LEFT`` and ``_RIGHT``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12.0, height))
    FigureCanvasAgg(fig)
    bottom, top = 0.55 / height, 0.35 / height
    return fig, fig.add_axes((_LEFT, bottom, _RIGHT - _LEFT, 1.0 - bottom - top))


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _dates(ax: Any) -> None:
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator(minticks=4, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


def _num_date(ts_ms: float) -> float:
    import matplotlib.dates as mdates

    return float(mdates.date2num(datetime.fromtimestamp(ts_ms / 1000, UTC)))


def _heatmap_png(
    group: str, heat: Mapping[str, Any], markers: Sequence[Mapping[str, Any]]
) -> bytes:
    import numpy as np
    from matplotlib import colormaps

    nodes: list[str] = heat["nodes"]
    matrix = np.array(
        [[math.nan if v is None else v for v in row] for row in heat["scores"]], dtype=float
    ).reshape(len(nodes), heat["columns"])
    finite = matrix[np.isfinite(matrix)]
    top = float(np.percentile(finite, 99.5)) if finite.size else 1.0
    top = max(top, 1.0)
    start, width = heat["start_ms"], heat["width_ms"]
    x0, x1 = _num_date(start), _num_date(start + heat["columns"] * width)
    fig, ax = _aligned(min(max(2.8, 0.13 * len(nodes) + 1.2), 14.0))
    image = ax.imshow(
        np.ma.masked_invalid(matrix),
        aspect="auto",
        interpolation="nearest",
        extent=(x0, x1, len(nodes) - 0.5, -0.5),
        cmap=colormaps["magma"].with_extremes(bad="#d0d0d0"),
        vmin=0.0,
        vmax=top,
    )
    box = ax.get_position()
    cax = fig.add_axes((_RIGHT + 0.01, box.y0, 0.012, box.height))
    fig.colorbar(image, cax=cax, label="node score (max per column)")
    ax.set_yticks(range(len(nodes)))
    ax.set_yticklabels(
        [_label(n) for n in nodes], fontsize=max(4.0, min(8.0, 420.0 / max(len(nodes), 1)))
    )
    row = {n: i for i, n in enumerate(nodes)}
    seen: set[str] = set()
    for m in markers:
        x = _num_date(m["ts_ms"])
        label = "known event" if m["source"] == "known" else "XID alert"
        show = None if label in seen else label
        seen.add(label)
        if m["node"] in row and m["source"] == "known":
            ax.plot(
                [x],
                [row[m["node"]]],
                "X",
                color="#00e5ff",
                markeredgecolor="black",
                markersize=10,
                label=show,
                zorder=5,
            )
            ax.annotate(
                _label(m["kind"]),
                (x, row[m["node"]]),
                xytext=(7, 4),
                textcoords="offset points",
                fontsize=7,
                color="white",
                bbox={"boxstyle": "round,pad=0.15", "fc": "black", "alpha": 0.6, "lw": 0},
            )
        elif m["node"] in row:
            ax.plot(
                [x],
                [row[m["node"]]],
                "v",
                color="white",
                markeredgecolor="black",
                markersize=7,
                label=show,
                zorder=4,
            )
        else:  # a group event: no row
            ax.axvline(x, color="#00e5ff", linestyle="--", linewidth=1.2, label=show)
    if seen:
        ax.legend(loc="upper left", fontsize=7, framealpha=0.8)
    _dates(ax)
    ax.set_xlim(x0, x1)
    ax.set_title(_label(f"node scores, group {group}"), fontsize=10)
    return _png(fig)


def _timeline_png(
    group: str,
    alerts: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    span: tuple[int, int],
) -> bytes:
    """One row per node and alert (first firing to last resolution), on the heatmap's span."""

    def key(a: Mapping[str, Any]) -> tuple[str, str]:
        return (a["node"] or "(group)", a["alertname"])

    keys = sorted({key(a) for a in alerts})[:_MAX_TIMELINE_ROWS]
    row = {k: i for i, k in enumerate(keys)}
    names = sorted({a["alertname"] for a in alerts})
    colour = {n: _ALERT_COLOURS[i % len(_ALERT_COLOURS)] for i, n in enumerate(names)}
    fig, ax = _aligned(min(max(1.9, 0.22 * len(keys) + 0.9), 14.0))
    lo, hi = span
    min_w = max((hi - lo) / 300, 1)  # a one-bucket alert still shows
    for a in alerts:
        if key(a) not in row:
            continue
        stop = a["resolved_ts"] if a["resolved_ts"] is not None else hi
        x0 = _num_date(a["fired_ts"])
        w = _num_date(a["fired_ts"] + max(stop - a["fired_ts"], min_w)) - x0
        ax.broken_barh([(x0, w)], (row[key(a)] - 0.38, 0.76), color=colour[a["alertname"]])
    for n in names:
        ax.plot([], [], "s", color=colour[n], label=_label(n))
    shown = False
    for e in events:
        for k in keys:
            if k[0] == (e["node"] or "(group)"):
                ax.plot(
                    [_num_date(e["ts_ms"])],
                    [row[k]],
                    "X",
                    color="#00b8d4",
                    markeredgecolor="black",
                    markersize=8,
                    zorder=5,
                    label=None if shown else "known event",
                )
                shown = True
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels(
        [_label(f"{node} · {name.removeprefix('Peerwatch')}") for node, name in keys],
        fontsize=max(5.0, min(8.0, 300.0 / len(keys))),
    )
    ax.set_ylim(len(keys) - 0.5, -0.5)
    ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7, borderaxespad=0)
    _dates(ax)
    ax.set_xlim(_num_date(lo), _num_date(hi))
    ax.grid(axis="x", color="#eee")
    ax.set_axisbelow(True)
    ax.set_title(_label(f"alerts, group {group} (first firing to last resolution)"), fontsize=10)
    return _png(fig)


def _per_day_png(by_group: Mapping[str, Mapping[str, Any]]) -> bytes:
    days = sorted({d for g in by_group.values() for d in g["by_day"]})
    fig = _figure(12.0, 2.6)
    ax = fig.add_subplot()
    bottom = [0] * len(days)
    x = [
        _num_date(datetime.strptime(d, "%Y-%m-%d").replace(tzinfo=UTC).timestamp() * 1000)
        for d in days
    ]
    for i, (name, g) in enumerate(by_group.items()):
        counts = [g["by_day"].get(d, 0) for d in days]
        if not any(counts):
            continue
        ax.bar(
            x,
            counts,
            bottom=bottom,
            width=0.8,
            align="edge",
            label=_label(name),
            color=_ALERT_COLOURS[i % len(_ALERT_COLOURS)],
        )
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    ax.set_ylabel("false alerts")
    ax.legend(fontsize=7, loc="upper left")
    _dates(ax)
    ax.set_title("false alerts per UTC day", fontsize=10)
    return _png(fig)
