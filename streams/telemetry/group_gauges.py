"""Gauges labelled by group first whose exposition text is kept between scrapes.

At fleet scale nearly all of the worker's ``/metrics`` page is per-node series (12,500
nodes: 2.4 MB, 0.33-0.41 CPU s a page through prometheus_client's encoder, taken from
the scoring process every 15-30 s). They change only when their group's bucket is
scored, so each group's sample lines are rendered once per change and reused: a scrape
renders the live registry (counters, histograms, process metrics) and joins the kept
text. A series' line up to its value is rendered by prometheus_client's own encoder
once; a new value is appended with its own float formatting (``floatToGoString``).

``GroupGauge`` is also an ordinary collector, so ``generate_latest`` of a registry
holding it gives the same samples (that is what the tests compare the page with).
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

Labels = tuple[str, ...]  # the label values after the group's
Encoder = Callable[[Collector], bytes]
OPENMETRICS_EOF = "# EOF\n"
# The page is built in the scrape's thread but holds the GIL: level 1 takes 7 ms for a
# 2.4 MB page (prometheus_client's default, 9: 62 ms) and gives 177 KB instead of 128 KB.
GZIP_LEVEL = 1


class _Families(Collector):
    """A collector of given families (what an encoder renders)."""

    def __init__(self, *families: Metric) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


class _Rendering:
    """One gauge's text in one exposition format (one content type)."""

    def __init__(self, encoder: Encoder, empty: Callable[[], GaugeMetricFamily]) -> None:
        self.encoder = encoder
        self.empty = empty
        self.header = _text(encoder, empty())  # HELP and TYPE only: the family has no sample
        self.prefixes: dict[str, dict[Labels, str]] = {}  # group -> labels -> line to its value
        self.groups: dict[str, tuple[Mapping[Labels, float], str]] = {}  # values -> lines

    def lines(self, group: str, values: Mapping[Labels, float]) -> str:
        kept = self.groups.get(group)
        if kept is not None and kept[0] is values:
            return kept[1]
        prefixes = self._prefixes(group, values)
        text = "".join(f"{prefixes[labels]}{floatToGoString(v)}\n" for labels, v in values.items())
        self.groups[group] = (values, text)
        return text

    def _prefixes(self, group: str, values: Mapping[Labels, float]) -> dict[Labels, str]:
        known = self.prefixes.get(group, {})
        new = [labels for labels in values if labels not in known]
        if new:
            probe = self.empty()
            for labels in new:
                probe.add_metric([group, *labels], 0.0)
            lines = _text(self.encoder, probe).removeprefix(self.header).splitlines()
            # a sample line is "<name>{<labels>} <value>" (no timestamp on these gauges)
            rendered = {k: line.rsplit(" ", 1)[0] + " " for k, line in zip(new, lines, strict=True)}
            known = {**known, **rendered}
        if len(known) != len(values):  # a node that left takes its line with it
            known = {labels: known[labels] for labels in values}
        self.prefixes[group] = known
        return known


def _text(encoder: Encoder, family: Metric) -> str:
    return encoder(_Families(family)).decode().removesuffix(OPENMETRICS_EOF)


class GroupGauge(Collector):
    """A gauge labelled ``group`` then ``labelnames``, set a group at a time.

    Set from the event loop, rendered from the HTTP threads: a group's values are a new
    mapping on every change (never changed in place), so a rendering kept for the mapping
    it was made from is current while that mapping is.
    """

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str] = (), *,
        registry: CollectorRegistry | None = None,
    ) -> None:  # fmt: skip
        self.name = name
        self.documentation = documentation
        self.labelnames = ("group", *labelnames)
        self._values: dict[str, Mapping[Labels, float]] = {}
        self._lock = threading.Lock()  # for _values: set from the loop, read by scrapes
        self._renderings: dict[str, _Rendering] = {}  # content type -> its rendering
        self._render_lock = threading.Lock()  # one scrape renders at a time
        if registry is not None:
            registry.register(self)

    def replace(self, group: str, values: Mapping[Labels, float]) -> None:
        """The group's series are ``values`` now (a series left out is gone)."""
        with self._lock:
            if values:
                self._values[group] = dict(values)
            else:
                self._values.pop(group, None)

    def set(self, group: str, labels: Labels, value: float) -> None:
        """One series of the group (its others stay)."""
        with self._lock:
            self._values[group] = {**self._values.get(group, {}), labels: value}

    def forget(self, group: str) -> None:
        self.replace(group, {})

    def _empty(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def describe(self) -> Iterable[Metric]:
        return [self._empty()]  # the name, so a registry refuses a second of it

    def collect(self) -> Iterator[Metric]:
        family = self._empty()
        with self._lock:
            groups = list(self._values.items())
        for group, values in groups:
            for labels, v in values.items():
                family.add_metric([group, *labels], v)
        yield family

    def text(self, encoder: Encoder, content_type: str) -> str:
        """The family's HELP, TYPE and sample lines as ``encoder`` writes them."""
        with self._lock:
            groups = dict(self._values)
        with self._render_lock:
            rendering = self._renderings.get(content_type)
            if rendering is None:
                rendering = self._renderings[content_type] = _Rendering(encoder, self._empty)
            for group in rendering.groups.keys() - groups.keys():  # gone: its lines go too
                del rendering.groups[group]
                rendering.prefixes.pop(group, None)
            lines = [rendering.lines(g, v) for g, v in groups.items()]
        return rendering.header + "".join(lines)


def exposition(
    live: CollectorRegistry,
    gauges: Iterable[GroupGauge],
    accept: str | None,
    accept_encoding: str | None = None,
) -> tuple[bytes, list[tuple[str, str]]]:
    """A ``/metrics`` body and its headers: ``live`` rendered now, ``gauges`` from kept text,
    in the format ``accept`` asks for (prometheus_client's negotiation and gzip rule)."""
    encoder, content_type = choose_encoder(accept or "")
    page = encoder(live).decode()
    eof = OPENMETRICS_EOF if page.endswith(OPENMETRICS_EOF) else ""
    page = page.removesuffix(eof) + "".join(g.text(encoder, content_type) for g in gauges) + eof
    body = page.encode()
    headers = [("Content-Type", content_type)]
    if gzip_accepted(accept_encoding or ""):
        body = gzip.compress(body, compresslevel=GZIP_LEVEL)
        headers.append(("Content-Encoding", "gzip"))
    return body, headers
