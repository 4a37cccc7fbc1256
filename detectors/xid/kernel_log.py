"""Kernel log lines → :class:`XidEvent`; it never raises.

``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., ...`` (or the driver's "GPU … has
fallen off the bus" line: XID 79) → an event, anything else → None.

Sub-status keys (see :mod:`detectors.xid.catalog`): for NVLink5 (144-150)
``<Fatal|Nonfatal>:<UNIT>:<subcode>:<error status>`` — the driver's own
severity word, the unit mnemonic, IntrInfo bits 20-25 and the second
register, e.g. ``Fatal:NETIR_LINK_EVT:38:0x00000000`` — and for 154 the
recovery action it names (``NODE_REBOOT_REQUIRED``).
"""

from __future__ import annotations

import re

from detectors.xid.events import XidEvent

__all__ = ["FALLEN_OFF_XID", "normalize_pci_bus_id", "parse_kernel_line"]

_HEX = "[0-9A-Fa-f]"
_PCI = (
    rf"(?:PCI:)?(?P<domain>{_HEX}{{8}}|{_HEX}{{4}}):(?P<bus>{_HEX}{{2}}):(?P<dev>{_HEX}{{2}})"
    r"(?:\.(?P<fn>[0-7]))?"
)
_KERNEL_LINE = re.compile(
    rf"NVRM:\s*Xid\s*\(\s*{_PCI}\s*\)\s*:?\s*(?P<xid>\d{{1,6}})(?!\d)\s*,?(?P<rest>.*)",
    re.ASCII,
)
_PCI_ONLY = re.compile(rf"\s*{_PCI}\s*", re.ASCII)
# The driver's own line when a GPU drops off PCIe, printed with (or, by older and
# some newer drivers, instead of) the ``Xid ... 79`` line: "NVRM: GPU 0000:3b:00.0: GPU
# has fallen off the bus.", "NVRM: GPU at PCI:0000:3b:00: ...", "NVRM: The NVIDIA GPU
# 0000:3b:00.0 (PCI ID: 10de:2330) installed in this system has fallen off the bus ...".
_FALLEN_OFF = re.compile(
    rf"NVRM:\s*(?:The\s+NVIDIA\s+)?GPU\s+(?:at\s+)?{_PCI}(?:\s*\(PCI ID:[^)]{{0,32}}\))?"
    r"[\s:,][^\n]{0,120}?\b(?i:has\s+fallen\s+off\s+the\s+bus)",
    re.ASCII,
)
FALLEN_OFF_XID = 79
_PID = re.compile(
    r"\s*pid\s*=\s*(?:'?<[^>,]*>'?|'(?P<qpid>\d+)'|(?P<pid>\d+)|[^,]*)\s*(?:,|$)", re.ASCII
)
_NAME = re.compile(r"\s*name\s*=\s*(?P<name>[^,]*?)\s*(?:,|$)", re.ASCII)
_NVLINK5 = re.compile(
    r"\s*(?P<unit>[A-Za-z][A-Za-z0-9_]*)\s+(?P<sev>Fatal|Non-?fatal)\b(?P<tail>.*)",
    re.ASCII | re.IGNORECASE,
)
_REGISTERS = re.compile(
    r"\(\s*0x(?P<intr>[0-9A-Fa-f]{1,8})[\s,]+0x(?P<status>[0-9A-Fa-f]{1,8})", re.ASCII
)
_RECOVERY = re.compile(r"\bto\s+0x[0-9A-Fa-f]+\s*\((?P<action>[^)]{1,64})\)", re.ASCII)


def normalize_pci_bus_id(text: str) -> str | None:
    """``0000:3b:00``, ``PCI:0000:3B:00``, ``00000000:3B:00.0`` → ``0000:3b:00.0``; else None.

    The domain keeps 4 hex digits when it fits (8 otherwise) and the function
    defaults to 0, so the NVRM form and dcgm-exporter's ``pci_bus_id`` label agree.
    """
    if not isinstance(text, str):
        return None
    m = _PCI_ONLY.fullmatch(text)
    return None if m is None else _pci(m)


def _pci(m: re.Match[str]) -> str:
    domain = int(m["domain"], 16)
    width = 4 if domain <= 0xFFFF else 8
    return f"{domain:0{width}x}:{m['bus'].lower()}:{m['dev'].lower()}.{m['fn'] or '0'}"


def parse_kernel_line(line: str) -> XidEvent | None:
    """An ``NVRM: Xid (PCI:…): N, …`` kernel line → :class:`XidEvent`, anything else → None.

    The driver's "GPU … has fallen off the bus" line without an ``Xid`` prefix is
    the XID 79 event (the same bus id and code as its ``Xid`` twin, so one incident).

    Accepts dmesg (``[12345.678] ``, ``[Fri Aug 30 11:43:09 2024] ``), journald
    or syslog prefixes (``Oct 01 13:00:00 host kernel: ``), ``/dev/kmsg``
    records, 4- or 8-digit PCI domains, with or without ``PCI:``, with or
    without ``pid=``/``name=`` (``pid='<unknown>'`` gives pid None). Never raises.
    """
    if not isinstance(line, str):
        return None
    m = _KERNEL_LINE.search(line)
    if m is None:
        fallen = _FALLEN_OFF.search(line)
        if fallen is None:
            return None
        return XidEvent(xid=FALLEN_OFF_XID, source="log", raw=line.strip(), pci_bus_id=_pci(fallen))
    xid = int(m["xid"])
    if xid < 1:
        return None
    body = m["rest"]
    pid: int | None = None
    process: str | None = None
    for _ in range(2):  # "pid=…, name=…," in either order, each at most once
        pm = _PID.match(body) if pid is None else None
        if pm is not None and pm.end() > 0:
            digits = pm["pid"] or pm["qpid"]
            pid = int(digits) if digits else None
            body = body[pm.end() :]
            continue
        nm = _NAME.match(body) if process is None else None
        if nm is not None and nm.end() > 0:
            name = nm["name"].strip().strip("'\"")
            process = None if not name or name.startswith("<") else name
            body = body[nm.end() :]
    return XidEvent(
        xid=xid,
        source="log",
        raw=line.strip(),
        pci_bus_id=_pci(m),
        pid=pid,
        process=process,
        substatus=_substatus(xid, body),
    )


def _substatus(xid: int, body: str) -> str | None:
    if 144 <= xid <= 150:
        m = _NVLINK5.match(body)
        if m is None:
            return None
        severity = "Fatal" if m["sev"].lower() == "fatal" else "Nonfatal"
        key = f"{severity}:{m['unit'].upper()}"
        regs = _REGISTERS.search(m["tail"])
        if regs is not None:
            intr, status = int(regs["intr"], 16), int(regs["status"], 16)
            key += f":{(intr >> 20) & 0x3F}:0x{status:08x}"
        return key
    if xid == 154:
        m = _RECOVERY.search(body)
        if m is None:
            return None
        words = re.sub(r"[^A-Za-z0-9]+", "_", m["action"]).strip("_").upper()
        return words or None
    return None
