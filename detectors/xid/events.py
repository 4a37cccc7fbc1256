"""One XID seen on one GPU: the value both the kernel-log parser and the gauge tracker produce."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, get_args

from detectors.checks import check_fields, int_rule, one_of, rule
from detectors.state_codec import JsonState

__all__ = ["Source", "XidEvent"]

Source = Literal["log", "metric"]


@dataclass(frozen=True)
class XidEvent(JsonState):
    """One XID seen on one GPU, from a kernel log line or a DCGM gauge change.

    :func:`parse_kernel_line` knows only what the line says (PCI bus id, code,
    pid, sub-status); the shell adds ``node``, ``gpu`` and ``ts_ms`` with
    :meth:`with_origin` before escalation. ``gpu`` is the DCGM ``gpu`` label
    (or the PCI bus id when the index is not known).
    """

    xid: int = field(metadata=rule(int_rule(numpy=False)))
    source: Source = field(metadata=rule(one_of(*get_args(Source))))
    raw: str = ""
    node: str | None = None
    gpu: str | None = None
    ts_ms: int | None = None
    pci_bus_id: str | None = None
    pid: int | None = None
    process: str | None = None
    substatus: str | None = None

    def __post_init__(self) -> None:
        check_fields(self)

    def with_origin(self, *, node: str, gpu: str, ts_ms: int) -> XidEvent:
        """The same event placed on a node, GPU and time."""
        return replace(self, node=node, gpu=gpu, ts_ms=int(ts_ms))


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)
