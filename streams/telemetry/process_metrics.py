"""What every peerwatch process exports about itself: ``peerwatch_build_info`` and
prometheus_client's standard process, platform and GC collectors, on the process's
own registry (the default registry is a global peerwatch does not use)."""

from __future__ import annotations

import importlib
import platform
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version

from prometheus_client import (
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.registry import CollectorRegistry


def installed_version(package: str) -> str:
    """The installed version of ``package``, or ``unknown`` (a source tree never installed)."""
    try:
        return package_version(package)
    except PackageNotFoundError:
        return "unknown"


def peerwatch_version() -> str:
    return installed_version("peerwatch")


def installed_decoder() -> str:
    """``native`` if the compiled remote_write decoder (``peerwatch_native``) loads, else
    ``python``: what an install without Rust at build time runs."""
    try:
        importlib.import_module("peerwatch_native")
    except ImportError:
        return "python"
    return "native"


def register_process_metrics(registry: CollectorRegistry, decoder: str | None = None) -> None:
    """``process_*``, ``python_info``, ``python_gc_*`` and ``peerwatch_build_info``.

    ``decoder``: the remote_write decoder this process runs (the ingest's choice); by
    default the one the install carries."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    Gauge(
        "peerwatch_build_info",
        "1, labelled with the versions this process runs",
        ["version", "python", "faust", "aiokafka", "decoder"],
        registry=registry,
    ).labels(
        version=peerwatch_version(),
        python=platform.python_version(),
        faust=installed_version("faust-streaming"),
        aiokafka=installed_version("aiokafka"),
        decoder=decoder or installed_decoder(),
    ).set(1)
