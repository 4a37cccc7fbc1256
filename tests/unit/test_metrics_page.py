"""The worker's /metrics page (``WorkerMetrics.page``, its per-group text kept between
scrapes) holds what prometheus_client renders of the whole registry: the same families,
samples and lines, in both formats, after every bucket of a pipeline run."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import Metric, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families

from streams.telemetry.metrics import WorkerMetrics
from streams.worker.pipeline import Pipeline
from streams.worker.publishing import observe_bucket
from tests.unit.test_node_metrics import remap_rounds

# what Prometheus 2.x sends (scrape_protocols' default)
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
MOVING = ("process_", "python_gc_")  # change between two renderings of the same registry


def lines(text: str) -> list[str]:
    return sorted(ln for ln in text.splitlines() if not ln.startswith(MOVING))


def families(text: str, parse: Callable[[str], Iterable[Metric]]) -> dict[str, Any]:
    """name -> type, help and samples, as prometheus_client's own parser reads the page."""
    return {
        f.name: (f.type, f.documentation, sorted((s.name, sorted(s.labels.items()), s.value)
                                                 for s in f.samples))
        for f in parse(text)
        if not f.name.startswith(MOVING)
    }  # fmt: skip


def assert_page_is_the_registry(m: WorkerMetrics) -> None:
    text = m.page(None)[0].decode()
    whole = generate_latest(m.registry).decode()
    assert lines(text) == lines(whole)
    parse = text_string_to_metric_families
    assert families(text, parse) == families(whole, parse)
    om, headers = m.page(PROMETHEUS_ACCEPT)
    assert headers[0][1].startswith("application/openmetrics-text; version=1.0.0")
    whole_om = openmetrics_latest(m.registry).decode()
    assert lines(om.decode()) == lines(whole_om)
    # the OpenMetrics parser refuses a family split in two or anything after "# EOF"
    assert families(om.decode(), parse_openmetrics) == families(whole_om, parse_openmetrics)


def run(m: WorkerMetrics, *, scrape: bool) -> None:
    """A simulated job's buckets on ``m`` as the worker exports them (``observe_bucket``)."""
    pipelines: list[Pipeline] = []
    for scored in remap_rounds(before_round=lambda pipeline, _: pipelines.append(pipeline)):
        for item in scored:
            if not item.ended:
                observe_bucket(m, pipelines[0], item)
        if scrape:
            assert_page_is_the_registry(m)


def test_the_page_is_the_registrys_exposition_after_every_bucket() -> None:
    m = WorkerMetrics()
    run(m, scrape=True)
    text = m.page(None)[0].decode()
    assert 'peerwatch_node_remapped_rows{group="job-a",kind="uncorrectable",node="gpu066"} 1.0' in (
        text
    )
    assert text.count("peerwatch_node_score{") == 8


def test_a_page_after_many_buckets_equals_one_after_each() -> None:
    """Kept text is renewed for every group changed since the last scrape, however many."""
    each, once = WorkerMetrics(), WorkerMetrics()
    run(each, scrape=True)
    run(once, scrape=False)
    each_lines, once_lines = (lines(m.page(None)[0].decode()) for m in (each, once))

    def timed(line: str) -> bool:  # a series' creation time, scoring times: the runs' differ
        name = line.split("{")[0].split(" ")[0]
        return name.endswith("_created") or name.startswith("peerwatch_worker_score_seconds")

    assert [ln for ln in each_lines if not timed(ln)] == [ln for ln in once_lines if not timed(ln)]


def test_an_ended_groups_series_leave_the_page() -> None:
    m = WorkerMetrics()
    run(m, scrape=True)
    m.nodes.observe("job-b", {}, {"n1": {"remap_pending@0": 1.0}}, [])
    m.forget_group("job-a")
    text = m.page(None)[0].decode()
    assert 'group="job-a"' not in text and 'group="job-b"' in text
    assert_page_is_the_registry(m)


def test_a_page_is_gzipped_when_asked() -> None:
    m = WorkerMetrics()
    run(m, scrape=False)
    body, headers = m.page(None, "gzip")
    assert ("Content-Encoding", "gzip") in headers
    assert lines(gzip.decompress(body).decode()) == lines(m.page(None)[0].decode())
