"""peerwatch's metric names follow Prometheus' conventions: base units, unit suffixes,
``_total`` on counters, and the standard process collectors and build info beside them."""

from __future__ import annotations

import logging
import re

import pytest
from prometheus_client import generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import CollectorRegistry

from detectors.failslow.slo import SloSummary
from detectors.population import Composition
from streams.ingest.remote_write import NATIVE_AVAILABLE
from streams.telemetry.metrics import IngestMetrics, WorkerMetrics
from streams.telemetry.process_metrics import peerwatch_version

# units Prometheus says to convert to their base unit (seconds, bytes, ratios)
NOT_BASE_UNITS = ("hours", "minutes", "days", "ms", "milliseconds", "millis", "kb", "mb", "percent")
STANDARD = ("process_", "python_")


def families(registry: CollectorRegistry) -> dict[str, str]:
    """Exposed metric family names -> type."""
    return {m.name: m.type for m in registry.collect()}


def registries() -> list[tuple[str, CollectorRegistry]]:
    return [("ingest", IngestMetrics().registry), ("worker", WorkerMetrics().registry)]


@pytest.mark.parametrize(("process", "registry"), registries())
def test_own_metrics_are_prefixed_and_in_base_units(process: str, registry: CollectorRegistry):
    own = [name for name in families(registry) if not name.startswith(STANDARD)]
    assert own, process
    for name in own:
        assert re.fullmatch(r"peerwatch_[a-z0-9_]+", name), name
        words = name.split("_")
        assert not set(words) & set(NOT_BASE_UNITS), f"{name}: not in base units"
        if "seconds" in words:
            # the unit is the last word (before _total / the histogram's suffixes)
            assert words[-1] == "seconds", f"{name}: unit is not the suffix"


@pytest.mark.parametrize(("process", "registry"), registries())
def test_counters_are_exposed_with_total(process: str, registry: CollectorRegistry) -> None:
    text = generate_latest(registry).decode()
    counters = [n for n, kind in families(registry).items() if kind == "counter"]
    assert counters
    for name in counters:
        assert f"# TYPE {name}_total counter" in text or f"# TYPE {name} counter" in text
        assert not name.endswith("_total")  # the client appends it: no _total_total


@pytest.mark.parametrize(("process", "registry"), registries())
def test_standard_collectors_and_build_info(process: str, registry: CollectorRegistry) -> None:
    text = generate_latest(registry).decode()
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "python_info"):
        assert f"\n{name}" in text, name
    (line,) = [ln for ln in text.splitlines() if ln.startswith("peerwatch_build_info{")]
    assert f'version="{peerwatch_version()}"' in line
    assert re.search(r'python="3\.\d+\.\d+"', line), line
    assert f'decoder="{"native" if NATIVE_AVAILABLE else "python"}"' in line
    assert line.endswith(" 1.0")


def test_gpu_time_is_exported_in_gpu_seconds() -> None:
    """The SLO summary counts GPU-hours; /metrics has them as GPU-seconds."""
    metrics = WorkerMetrics()
    summary = SloSummary(1_000.0, 990.0, 800.0, 90.0, 0.0, 0.0, 2.0, 1.5, 0.25, 0.1, (), 1)
    metrics.observe_slo("job", summary, slow=False)
    text = generate_latest(metrics.registry).decode()
    assert 'peerwatch_job_allocated_gpu_seconds_total{group="job"} 7200.0' in text
    assert 'peerwatch_job_lost_gpu_seconds_total{group="job"} 900.0' in text
    assert 'peerwatch_job_below_slo_seconds_total{group="job"} 90.0' in text
    assert "hours" not in "".join(ln for ln in text.splitlines() if not ln.startswith("#"))


def test_forget_group_removes_every_per_group_series() -> None:
    """Every metric labelled by group, whoever adds it, goes when its group ends."""
    metrics = WorkerMetrics()
    labelled = [
        m
        for m in vars(metrics).values()
        if isinstance(m, MetricWrapperBase) and "group" in m._labelnames
    ]
    assert len(labelled) >= 5 and len(metrics.gauges) >= 10  # and the kept-text gauges
    known = {"population": "job", "phase": "save"}  # label values from a closed set
    for group in ("job-a", "job-b"):
        metrics.observe_phase(group, "save")
        metrics.observe_composition(group, Composition(job=8, busy=8, idle=1))
        for metric in labelled:
            metric.labels(
                **{n: group if n == "group" else known.get(n, "x") for n in metric._labelnames}
            )
        for gauge in metrics.gauges:
            gauge.set(group, tuple(known.get(n, "x") for n in gauge.labelnames[1:]), 1.0)
    metrics.forget_group("job-a")
    text = generate_latest(metrics.registry).decode()
    assert 'group="job-a"' not in text
    assert 'group="job-b"' in text


def test_the_ingest_names_its_decoder_at_start_and_warns_on_the_fallback(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from streams.ingest import server
    from streams.ingest.remote_write import WriteRequestDecoder

    caplog.set_level(logging.INFO, logger=server.log.name)
    server.say_decoder(WriteRequestDecoder(native=False))
    monkeypatch.setattr(server, "NATIVE_AVAILABLE", False)  # an install built without cargo
    server.say_decoder(WriteRequestDecoder(native=False))
    first, fallback = caplog.records
    if NATIVE_AVAILABLE:
        assert first.levelno == logging.INFO
        assert first.getMessage() == "ingest_decoder decoder=python set_by=ingest_decoder"
    assert fallback.levelno == logging.WARNING
    assert "decoder=python reason=the compiled remote_write decoder" in fallback.getMessage()
    assert "not installed" in fallback.getMessage()
    text = generate_latest(IngestMetrics(decoder="python").registry).decode()
    assert 'decoder="python"' in text
