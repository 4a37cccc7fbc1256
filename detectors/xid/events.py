"""One XID seen on one GPU: the value both the kernel-log parser and the gauge tracker produce."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

__all__ = ["Source", "XidEvent"]

Source = Literal["log", "metric"]


@dataclass(frozen=True)
class XidEvent:
    """One XID seen on one GPU, from a kernel log line or a DCGM gauge change.

    :func:`parse_kernel_line` knows only what the line says (PCI bus id, code,
    pid, sub-status); the shell adds ``node``, ``gpu`` and ``ts_ms`` with
    :meth:`with_origin` before escalation. ``gpu`` is the DCGM ``gpu`` label
    (or the PCI bus id when the index is not known).
    """

    xid: int
    source: Source
    raw: str = ""
    node: str | None = None
    gpu: str | None = None
    ts_ms: int | None = None
    pci_bus_id: str | None = None
    pid: int | None = None
    process: str | None = None
    substatus: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.xid, bool) or not isinstance(self.xid, int) or self.xid < 1:
            raise ValueError(f"an XID is an int >= 1, got {self.xid!r}")
        if self.source not in ("log", "metric"):
            raise ValueError(f"source must be 'log' or 'metric', got {self.source!r}")

    def with_origin(self, *, node: str, gpu: str, ts_ms: int) -> XidEvent:
        """The same event placed on a node, GPU and time."""
        return replace(self, node=node, gpu=gpu, ts_ms=int(ts_ms))

    def to_dict(self) -> dict[str, Any]:
        return {
            "xid": self.xid,
            "source": self.source,
            "raw": self.raw,
            "node": self.node,
            "gpu": self.gpu,
            "ts_ms": self.ts_ms,
            "pci_bus_id": self.pci_bus_id,
            "pid": self.pid,
            "process": self.process,
            "substatus": self.substatus,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> XidEvent:
        ts, pid = data.get("ts_ms"), data.get("pid")
        return cls(
            xid=int(data["xid"]),
            source=data["source"],
            raw=str(data.get("raw", "")),
            node=_opt_str(data.get("node")),
            gpu=_opt_str(data.get("gpu")),
            ts_ms=None if ts is None else int(ts),
            pci_bus_id=_opt_str(data.get("pci_bus_id")),
            pid=None if pid is None else int(pid),
            process=_opt_str(data.get("process")),
            substatus=_opt_str(data.get("substatus")),
        )


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)
