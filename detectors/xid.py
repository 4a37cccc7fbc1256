"""XID → severity and recovery action: catalog, kernel-line parsing, gauge changes, escalation.

NVIDIA GPUs report hardware and software faults as XID codes, and each code
calls for a different recovery (report 000: the code *is* the recovery
strategy). Four pieces, all pure:

* :class:`XidCatalog` — XID (and, for some codes, a decoded sub-status) →
  :class:`XidEntry` (name, severity, action in NVIDIA's resolution buckets,
  operator text). Built from plain dicts — the parsed ``xid.toml`` with its
  profiles and an optional operator override — so the mapping is data, not code
  branches. Unknown action or severity names raise ``ValueError`` naming the entry.
* :func:`parse_kernel_line` — ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., ...``
  (or the driver's "GPU … has fallen off the bus" line: XID 79) → :class:`XidEvent`,
  or None for anything else. It never raises.
* :class:`XidGaugeTracker` — ``DCGM_FI_DEV_XID_ERRORS`` holds the *last* XID per
  GPU, not a count, so an XID is a *change* of the gauge to a non-zero code.
* :class:`XidEscalator` — events in time order per (node, gpu) →
  :class:`XidDecision`: the catalog action, escalated when the fault repeats,
  with the report's retry backoff (10 → 20 → 40 min) for RESTART_APP.

Sub-status keys are ``":"``-joined parts, most general first, and a lookup
falls back by dropping the last part. The parser builds them for NVLink5
(144-150) as ``<Fatal|Nonfatal>:<UNIT>:<subcode>:<error status>`` — the
driver's own severity word, the unit mnemonic, IntrInfo bits 20-25 and the
second register, e.g. ``Fatal:NETIR_LINK_EVT:38:0x00000000`` — and for 154 as
the recovery action it names (``NODE_REBOOT_REQUIRED``).

Escalation works on *incidents*: one fault logs a burst (145, 149, 79 and 45
within seconds; several lines of 13; the log line and the gauge change for the
same XID), and a burst must not count as a repeat. Events on one GPU closer
than ``incident_gap_ms`` to the incident's last actionable event belong to it;
the incident's action is the most disruptive one seen so far (never lowered),
and repeats are counted between incidents. Within ``window_ms`` (24 h):

* an XID whose entry has ``repeat_action`` and that already appeared in an
  earlier incident gets that action (79: RESTART_BM, then CONTACT_SUPPORT);
* a reset-class XID (RESET_GPU, RESTART_VM, RESTART_BM) after an earlier
  reset-class incident gets ``repeated_reset_action`` (CONTACT_SUPPORT): the
  reset did not fix the GPU, so stop retrying on it and use a spare.

Action order, least to most disruptive: IGNORE < RESTART_APP < RESET_GPU <
RESTART_VM < RESTART_BM < (UPDATE_SWFW, CHECK_*, WORKFLOW_*: an operator has
to decide) < CONTACT_SUPPORT.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "ACTIONS",
    "RESET_CLASS",
    "SEVERITIES",
    "EscalationParams",
    "XidCatalog",
    "XidDecision",
    "XidEntry",
    "XidEscalator",
    "XidEvent",
    "XidGaugeParams",
    "XidGaugeTracker",
    "action_rank",
    "is_action",
    "normalize_pci_bus_id",
    "parse_kernel_line",
]

Severity = Literal["info", "warning", "critical"]
Source = Literal["log", "metric"]

SEVERITIES: tuple[Severity, ...] = ("info", "warning", "critical")
_SEVERITY_RANK: Mapping[str, int] = {s: i for i, s in enumerate(SEVERITIES)}

_OPERATOR_RANK = 5  # UPDATE_SWFW, CHECK_*, WORKFLOW_*: hold the GPU for a human decision
ACTIONS: Mapping[str, int] = MappingProxyType(
    {
        "IGNORE": 0,
        "RESTART_APP": 1,
        "RESET_GPU": 2,
        "RESTART_VM": 3,
        "RESTART_BM": 4,
        "UPDATE_SWFW": _OPERATOR_RANK,
        "CHECK_MECHANICALS": _OPERATOR_RANK,
        "CHECK_UVM": _OPERATOR_RANK,
        "CONTACT_SUPPORT": 6,
    }
)
"""Named resolution buckets and their rank; any ``WORKFLOW_<NAME>`` is valid too."""

RESET_CLASS = frozenset({"RESET_GPU", "RESTART_VM", "RESTART_BM"})
"""Actions that reset the GPU: a second reset-class incident means the reset did not help."""

_WORKFLOW = re.compile(r"WORKFLOW_[A-Z0-9]+(?:_[A-Z0-9]+)*")

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS


def is_action(name: object) -> bool:
    """Whether ``name`` is a resolution bucket this module knows."""
    return isinstance(name, str) and (name in ACTIONS or _WORKFLOW.fullmatch(name) is not None)


def action_rank(action: str) -> int:
    """How disruptive ``action`` is (higher = more); ``ValueError`` for an unknown name."""
    if action in ACTIONS:
        return ACTIONS[action]
    if _WORKFLOW.fullmatch(action):
        return _OPERATOR_RANK
    raise ValueError(f"unknown action {action!r}; known: {', '.join(ACTIONS)}, WORKFLOW_<NAME>")


# --------------------------------------------------------------------------- catalog


@dataclass(frozen=True)
class XidEntry:
    """What one XID (or one of its sub-statuses) means and what to do about it.

    ``action`` is the catalog's recovery action; ``repeat_action`` the action
    when the same XID comes back on the same GPU in a later incident within the
    escalation window (None: no such rule). ``substatus`` is the sub-status key
    that matched (None for the XID's own entry); ``known`` is False for the
    catalog's default entry used for XIDs without one.
    """

    xid: int
    name: str
    severity: Severity
    action: str
    text: str = ""
    note: str = ""
    repeat_action: str | None = None
    substatus: str | None = None
    known: bool = True

    def __post_init__(self) -> None:
        where = f"xid {self.xid}" + (f" substatus {self.substatus!r}" if self.substatus else "")
        if isinstance(self.xid, bool) or not isinstance(self.xid, int) or self.xid < 0:
            raise ValueError(f"{where}: xid must be an int >= 0")
        if self.severity not in _SEVERITY_RANK:
            raise ValueError(f"{where}: unknown severity {self.severity!r}; known: {SEVERITIES}")
        for name in ("action", "repeat_action"):
            value = getattr(self, name)
            if value is not None and not is_action(value):
                raise ValueError(
                    f"{where}: unknown {name} {value!r}; known: {', '.join(ACTIONS)}, "
                    "WORKFLOW_<NAME>"
                )

    def to_dict(self) -> dict[str, Any]:
        """The entry as catalog fields (the ``xid.toml`` shape, without ``xid``)."""
        return {
            "name": self.name,
            "severity": self.severity,
            "action": self.action,
            "text": self.text,
            "note": self.note,
            "repeat_action": self.repeat_action or "",  # "" = none (TOML has no null)
        }


_ENTRY_FIELDS = frozenset({"name", "severity", "action", "text", "note", "repeat_action"})
_XID_FIELDS = _ENTRY_FIELDS | {"substatus", "inherit_substatus"}
_PROFILE_FIELDS = frozenset({"description", "extends", "unknown", "xid"})
_OVERRIDE_FIELDS = frozenset({"description", "unknown", "xid"})


@dataclass(frozen=True)
class XidCatalog:
    """XID → :class:`XidEntry` for one profile (plus operator overrides).

    Build it with :meth:`from_data` from the parsed TOML. ``entries`` maps an
    XID to its own entry, ``substatus`` maps an XID to its sub-status entries
    (keys case-folded), ``unknown`` is the template for XIDs without an entry.
    """

    profile: str
    entries: Mapping[int, XidEntry]
    substatus: Mapping[int, Mapping[str, XidEntry]]
    unknown: XidEntry
    description: str = ""

    def __post_init__(self) -> None:
        if self.unknown.known:
            raise ValueError(
                f"profile {self.profile!r}: the unknown-XID entry must have known=False"
            )
        for xid, entry in self.entries.items():
            if entry.xid != xid or entry.substatus is not None:
                raise ValueError(f"profile {self.profile!r}: entry for xid {xid} is {entry}")

    def lookup(self, xid: int, substatus: str | None = None) -> XidEntry:
        """The entry for ``xid``, refined by ``substatus`` when the catalog has a match.

        ``substatus`` parts are tried most specific first (``a:b:c``, ``a:b``,
        ``a``), case-insensitively; without a match the XID's own entry is
        returned, and for an XID without an entry the catalog's unknown entry.
        """
        if isinstance(xid, bool) or not isinstance(xid, int) or xid <= 0:
            raise ValueError(f"an XID is an int >= 1, got {xid!r}")
        entry = self.entries.get(xid)
        if entry is None:
            return replace(self.unknown, xid=xid)
        subs = self.substatus.get(xid)
        if subs and substatus:
            parts = [p.strip() for p in substatus.split(":")]
            for n in range(len(parts), 0, -1):
                found = subs.get(":".join(parts[:n]).casefold())
                if found is not None:
                    return found
        return entry

    def codes(self) -> tuple[int, ...]:
        """The XIDs with an entry, ascending."""
        return tuple(sorted(self.entries))

    def to_dict(self) -> dict[str, Any]:
        """The effective catalog as one profile body (``from_data`` reads it back)."""
        xids: dict[str, Any] = {}
        for xid in self.codes():
            body = self.entries[xid].to_dict()
            subs = self.substatus.get(xid, {})
            if subs:
                body["substatus"] = {
                    sub.substatus: sub.to_dict() for sub in subs.values() if sub.substatus
                }
            xids[str(xid)] = body
        return {"description": self.description, "unknown": self.unknown.to_dict(), "xid": xids}

    @classmethod
    def from_data(
        cls,
        data: Mapping[str, Any],
        profile: str = "nvidia",
        overrides: Mapping[str, Any] | None = None,
    ) -> XidCatalog:
        """Build the catalog for ``profile`` from parsed catalog data, then apply ``overrides``.

        ``data`` has ``profiles.<name>`` bodies (``description``, ``extends``,
        ``unknown``, ``xid.<code>``); ``overrides`` is one body without
        ``extends``. Fields merge one by one over the inherited entry; sub-status
        entries are added to the inherited ones unless the entry sets
        ``inherit_substatus = false``. Every layer is validated on its own, so
        an error names the profile (or "overrides") and the entry.
        """
        if not isinstance(data, Mapping):
            raise ValueError("XID catalog data must be a table")
        extra = set(data) - {"profiles"}
        if extra:
            raise ValueError(f"XID catalog: unknown top-level key(s) {sorted(extra)}")
        profiles = data.get("profiles")
        if not isinstance(profiles, Mapping) or not profiles:
            raise ValueError("XID catalog: no [profiles.<name>] tables")
        chain: list[str] = []
        name: str | None = profile
        while name is not None:
            if name in chain:
                raise ValueError(f"XID profile {name!r} extends itself: {' -> '.join(chain)}")
            if name not in profiles:
                known = ", ".join(sorted(profiles))
                raise ValueError(f"unknown XID profile {name!r}; known: {known}")
            chain.append(name)
            body = profiles[name]
            if not isinstance(body, Mapping):
                raise ValueError(f"profile {name!r}: must be a table")
            parent = body.get("extends")
            if parent is not None and not isinstance(parent, str):
                raise ValueError(f"profile {name!r}: extends must be a profile name")
            name = parent

        merged = _RawBody()
        for name in reversed(chain):
            merged.merge(profiles[name], f"profile {name!r}", _PROFILE_FIELDS)
        if overrides is not None:
            merged.merge(overrides, "overrides", _OVERRIDE_FIELDS)
        return merged.build(profile)


class _RawBody:
    """Profile layers merged field by field before the entries are built."""

    def __init__(self) -> None:
        self.description = ""
        self.unknown: dict[str, Any] = {}
        self.xids: dict[int, dict[str, Any]] = {}
        self.subs: dict[int, dict[str, tuple[str, dict[str, Any]]]] = {}
        self.origin: dict[int, str] = {}

    def merge(self, body: Mapping[str, Any], where: str, allowed: frozenset[str]) -> None:
        if not isinstance(body, Mapping):
            raise ValueError(f"{where}: must be a table")
        extra = set(body) - allowed
        if extra:
            raise ValueError(f"{where}: unknown key(s) {sorted(extra)}; allowed: {sorted(allowed)}")
        description = body.get("description")
        if description is not None:
            self.description = _string(description, f"{where}: description")
        unknown = body.get("unknown")
        if unknown is not None:
            self.unknown.update(_fields(unknown, f"{where} unknown", _ENTRY_FIELDS))
        xids = body.get("xid", {})
        if not isinstance(xids, Mapping):
            raise ValueError(f"{where}: xid must be a table of [xid.<code>] entries")
        for key, raw in xids.items():
            xid = _xid_key(key, where)
            at = f"{where} xid {xid}"
            fields = _fields(raw, at, _XID_FIELDS)
            subs = fields.pop("substatus", None)
            inherit = fields.pop("inherit_substatus", True)
            if not isinstance(inherit, bool):
                raise ValueError(f"{at}: inherit_substatus must be true or false")
            self.xids.setdefault(xid, {}).update(fields)
            self.origin[xid] = at
            table = self.subs.setdefault(xid, {})
            if not inherit:
                table.clear()
            if subs is None:
                continue
            if not isinstance(subs, Mapping):
                raise ValueError(f'{at}: substatus must be a table of [substatus."<key>"]')
            for sub_key, sub_raw in subs.items():
                display = _substatus_key(sub_key, at)
                sub_fields = _fields(sub_raw, f"{at} substatus {display!r}", _ENTRY_FIELDS)
                folded = display.casefold()
                _, old = table.get(folded, (display, {}))
                table[folded] = (display, {**old, **sub_fields})

    def build(self, profile: str) -> XidCatalog:
        unknown_fields = {"name": "Unknown XID", **self.unknown}
        unknown = _entry(0, unknown_fields, f"profile {profile!r} unknown", known=False)
        entries: dict[int, XidEntry] = {}
        substatus: dict[int, Mapping[str, XidEntry]] = {}
        for xid in sorted(self.xids):
            fields = {"name": f"XID {xid}", **self.xids[xid]}
            where = self.origin[xid]
            entries[xid] = _entry(xid, fields, where)
            subs = {
                folded: _entry(xid, {**fields, **sub}, f"{where} substatus {display!r}", display)
                for folded, (display, sub) in self.subs.get(xid, {}).items()
            }
            if subs:
                substatus[xid] = subs
        # plain dicts (not MappingProxyType) so the catalog pickles and deep-copies
        return XidCatalog(
            profile=profile,
            entries=entries,
            substatus=substatus,
            unknown=unknown,
            description=self.description,
        )


def _entry(
    xid: int,
    fields: Mapping[str, Any],
    where: str,
    substatus: str | None = None,
    known: bool = True,
) -> XidEntry:
    for required in ("severity", "action"):
        if required not in fields:
            raise ValueError(f"{where}: no {required}")
    repeat = fields.get("repeat_action") or None  # "" clears an inherited repeat_action
    try:
        return XidEntry(
            xid=xid,
            name=fields["name"],
            severity=fields["severity"],
            action=fields["action"],
            text=fields.get("text", ""),
            note=fields.get("note", ""),
            repeat_action=repeat,
            substatus=substatus,
            known=known,
        )
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _fields(raw: object, where: str, allowed: frozenset[str]) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: must be a table")
    extra = set(raw) - allowed
    if extra:
        raise ValueError(f"{where}: unknown field(s) {sorted(extra)}; allowed: {sorted(allowed)}")
    out = dict(raw)
    for name in ("name", "text", "note", "severity", "action", "repeat_action"):
        if name in out:
            _string(out[name], f"{where}: {name}")
    if "severity" in out and out["severity"] not in _SEVERITY_RANK:
        raise ValueError(f"{where}: unknown severity {out['severity']!r}; known: {SEVERITIES}")
    if "action" in out and not is_action(out["action"]):
        raise ValueError(
            f"{where}: unknown action {out['action']!r}; known: {', '.join(ACTIONS)}, "
            "WORKFLOW_<NAME>"
        )
    if out.get("repeat_action") and not is_action(out["repeat_action"]):
        raise ValueError(f"{where}: unknown repeat_action {out['repeat_action']!r}")
    return out


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a string, got {value!r}")
    return value


def _xid_key(key: object, where: str) -> int:
    text = str(key).strip()
    if isinstance(key, bool) or not text.isascii() or not text.isdigit() or int(text) < 1:
        raise ValueError(f"{where}: XID keys are integers >= 1, got {key!r}")
    return int(text)


def _substatus_key(key: object, where: str) -> str:
    if not isinstance(key, str):
        raise ValueError(f"{where}: substatus keys are strings, got {key!r}")
    parts = [p.strip() for p in key.split(":")]
    if not all(parts):
        raise ValueError(f"{where}: substatus key {key!r} has an empty part")
    return ":".join(parts)


# --------------------------------------------------------------------------- events


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


# --------------------------------------------------------------------------- gauge


@dataclass(frozen=True)
class XidGaugeParams:
    """How :class:`XidGaugeTracker` treats a GPU it has no state for.

    ``initial_known`` (default True): a non-zero first value is an XID that
    happened before we looked, not a new one. The gauge keeps the last XID for
    as long as the exporter runs — days — so a worker that restarts without its
    state (or starts fresh) would otherwise re-page every GPU that ever had an
    XID, and those stale events would make the escalator count a second reset
    and isolate healthy nodes. The cost: an XID raised while no tracker state
    existed is missed on the metric path (the kernel-log path and the peer
    detectors still see the fault). Set False for backfills, where the first
    sample lies inside the period under study.
    """

    initial_known: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.initial_known, bool):
            raise ValueError(f"initial_known must be a bool, got {self.initial_known!r}")


_MAX_XID = 2**31 - 1


class XidGaugeTracker:
    """``DCGM_FI_DEV_XID_ERRORS`` samples → an :class:`XidEvent` per *change* to a non-zero code.

    The gauge holds the last XID per GPU (0 = none yet). A code repeated in
    later scrapes is the same XID; a code that follows another code, or follows
    0 (the exporter restarted), is a new one. Samples older than or as old as
    the GPU's last one are ignored (out-of-order delivery, resends), and so are
    NaN, negative and non-integral values. State holds one (code, ts) per GPU.

    >>> t = XidGaugeTracker(XidGaugeParams(initial_known=False))
    >>> [e.xid if e else None for e in (t.observe("n1", "0", ts, v)
    ...  for ts, v in [(0, 0), (30, 94), (60, 94), (90, 0), (120, 94)])]
    [None, 94, None, None, 94]
    """

    def __init__(self, params: XidGaugeParams | None = None) -> None:
        self.params = params or XidGaugeParams()
        self._last: dict[tuple[str, str], tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._last)

    def observe(
        self,
        node: str,
        gpu: str,
        ts_ms: int,
        value: float,
        *,
        pci_bus_id: str | None = None,
    ) -> XidEvent | None:
        """Feed one sample; return the XID it reveals, if any."""
        key = (str(node), str(gpu))
        ts = int(ts_ms)
        prev = self._last.get(key)
        if prev is not None and ts <= prev[1]:
            return None
        if prev is not None and type(value) is float and value == prev[0]:
            self._last[key] = (prev[0], ts)  # the same code again (the usual sample): no XID
            return None
        code = _gauge_code(value)
        if code is None:
            return None
        self._last[key] = (code, ts)
        if code == 0:
            return None
        if prev is None:
            if self.params.initial_known:
                return None
            was = "no state"
        elif prev[0] == code:
            return None
        else:
            was = f"was {prev[0]}"
        return XidEvent(
            xid=code,
            source="metric",
            raw=f"DCGM_FI_DEV_XID_ERRORS={code} ({was})",
            node=key[0],
            gpu=key[1],
            ts_ms=ts,
            pci_bus_id=pci_bus_id,
        )

    def prune(self, before_ms: int) -> int:
        """Forget GPUs last sampled before ``before_ms``; return how many were dropped."""
        stale = [k for k, (_, ts) in self._last.items() if ts < before_ms]
        for key in stale:
            del self._last[key]
        return len(stale)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": 1,
            "series": [
                {"node": n, "gpu": g, "value": v, "ts_ms": ts}
                for (n, g), (v, ts) in sorted(self._last.items())
            ],
        }

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], params: XidGaugeParams | None = None
    ) -> XidGaugeTracker:
        if data.get("version") != 1:
            raise ValueError(f"unsupported XID gauge state version {data.get('version')!r}")
        tracker = cls(params)
        for row in data.get("series", ()):
            value, ts = int(row["value"]), int(row["ts_ms"])
            if value < 0:
                raise ValueError(f"negative XID gauge value in state: {row!r}")
            tracker._last[(str(row["node"]), str(row["gpu"]))] = (value, ts)
        return tracker


def _gauge_code(value: object) -> int | None:
    if isinstance(value, bool | str | bytes):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]  # numpy scalars, Decimal, int, float
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(number) or not number.is_integer():
        return None
    code = int(number)
    return code if 0 <= code <= _MAX_XID else None


# --------------------------------------------------------------------------- escalation


@dataclass(frozen=True)
class EscalationParams:
    """Windows and backoff of :class:`XidEscalator` (times in ms).

    ``window_ms`` (24 h): how far back a repeat counts. ``incident_gap_ms``
    (5 min): events on one GPU closer than this to the incident's last
    actionable event are the same incident — one fault logs a burst within
    seconds, while a retried job fails again only after the retry delay
    (>= 10 min) plus the checkpoint load (~31 min median in the report).
    ``retry_backoff_ms`` (10, 20, 40 min): the report's proposed delay before
    the 1st, 2nd, 3rd… consecutive RESTART_APP retry (the last value repeats).
    ``retry_streak_gap_ms`` (2 h): a RESTART_APP incident that starts within
    this of the previous one continues the streak (40-min delay + ~31-min load
    + a short run fits); a longer gap means the job trained in between.
    ``repeated_reset_action``: the action for a reset-class XID after an
    earlier reset-class incident within the window. ``max_xids_per_gpu``
    bounds how many distinct codes one GPU's state remembers.
    """

    window_ms: int = 24 * HOUR_MS
    incident_gap_ms: int = 5 * MINUTE_MS
    retry_backoff_ms: tuple[int, ...] = (10 * MINUTE_MS, 20 * MINUTE_MS, 40 * MINUTE_MS)
    retry_streak_gap_ms: int = 2 * HOUR_MS
    repeated_reset_action: str = "CONTACT_SUPPORT"
    max_xids_per_gpu: int = 32

    def __post_init__(self) -> None:
        for name in ("window_ms", "incident_gap_ms", "retry_streak_gap_ms", "max_xids_per_gpu"):
            _positive_int(name, getattr(self, name))
        if self.incident_gap_ms >= self.window_ms:
            raise ValueError("incident_gap_ms must be shorter than window_ms")
        if not isinstance(self.retry_backoff_ms, tuple) or not self.retry_backoff_ms:
            raise ValueError("retry_backoff_ms must be a non-empty tuple of ms")
        for value in self.retry_backoff_ms:
            _positive_int("retry_backoff_ms", value)
        if not is_action(self.repeated_reset_action):
            raise ValueError(f"unknown repeated_reset_action {self.repeated_reset_action!r}")

    @property
    def memory_ms(self) -> int:
        """How long a quiet GPU's state can still change a decision."""
        return max(self.window_ms, self.retry_streak_gap_ms, self.incident_gap_ms)


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


@dataclass(frozen=True)
class XidDecision:
    """What to do about one XID on one GPU, given what this GPU did before.

    ``action`` is the GPU's current incident action (never lower than an
    earlier event of the same incident); ``catalog_action`` what the catalog
    says for this XID alone. ``escalated``: the action was raised by a repeat
    rule. ``changed``: this event raised the GPU's action or severity (send it to the
    scheduler); False for events absorbed by an incident already at that
    action or higher, and for IGNORE. ``retry_after_ms``: for RESTART_APP, the
    backoff before the retry. ``incident_ts_ms``: when the incident began.
    """

    node: str
    gpu: str
    xid: int
    name: str
    severity: Severity
    action: str
    escalated: bool
    reason: str
    ts_ms: int
    catalog_action: str
    incident_ts_ms: int
    changed: bool
    retry_after_ms: int | None = None
    substatus: str | None = None
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "gpu": self.gpu,
            "xid": self.xid,
            "name": self.name,
            "severity": self.severity,
            "action": self.action,
            "escalated": self.escalated,
            "reason": self.reason,
            "ts_ms": self.ts_ms,
            "catalog_action": self.catalog_action,
            "incident_ts_ms": self.incident_ts_ms,
            "changed": self.changed,
            "retry_after_ms": self.retry_after_ms,
            "substatus": self.substatus,
            "text": self.text,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> XidDecision:
        retry = data.get("retry_after_ms")
        severity = data["severity"]
        if severity not in _SEVERITY_RANK:
            raise ValueError(f"unknown severity {severity!r}")
        for name in ("action", "catalog_action"):
            action_rank(data[name])
        return cls(
            node=str(data["node"]),
            gpu=str(data["gpu"]),
            xid=int(data["xid"]),
            name=str(data["name"]),
            severity=severity,
            action=data["action"],
            escalated=bool(data["escalated"]),
            reason=str(data["reason"]),
            ts_ms=int(data["ts_ms"]),
            catalog_action=data["catalog_action"],
            incident_ts_ms=int(data["incident_ts_ms"]),
            changed=bool(data["changed"]),
            retry_after_ms=None if retry is None else int(retry),
            substatus=_opt_str(data.get("substatus")),
            text=str(data.get("text", "")),
        )


@dataclass
class _GpuHistory:
    """One GPU's escalation memory: plain ints and strings, serialised by ``to_dict``."""

    incident_start_ms: int
    incident_last_ms: int
    action: str = "IGNORE"
    severity: Severity = "info"
    escalated: bool = False
    cause_xid: int = 0
    reset: bool = False  # a reset-class XID belongs to the current incident
    xids: list[int] = field(default_factory=list)  # codes in the current incident
    retry_counted: bool = False
    retry_after_ms: int | None = None
    reset_before_ms: int | None = None  # start of the latest earlier reset-class incident
    seen_before: dict[int, int] = field(default_factory=dict)  # xid → start of earlier incident
    retry_streak: int = 0
    last_retry_ms: int | None = None  # start of the latest RESTART_APP incident


class XidEscalator:
    """XID events → :class:`XidDecision`, escalating repeats per (node, gpu).

    Feed events in time order per GPU (a late event joins the open incident).
    The catalog is configuration, not state: pass the same one to
    :meth:`from_dict`.
    """

    def __init__(self, catalog: XidCatalog, params: EscalationParams | None = None) -> None:
        self.catalog = catalog
        self.params = params or EscalationParams()
        self._gpus: dict[tuple[str, str], _GpuHistory] = {}

    def __len__(self) -> int:
        return len(self._gpus)

    def decide(self, event: XidEvent) -> XidDecision:
        """The decision for ``event``; it must carry ``node``, ``gpu`` and ``ts_ms``."""
        if event.node is None or event.gpu is None or event.ts_ms is None:
            raise ValueError(
                f"XID {event.xid} event needs node, gpu and ts_ms (XidEvent.with_origin): {event}"
            )
        p = self.params
        ts = event.ts_ms
        entry = self.catalog.lookup(event.xid, event.substatus)
        key = (event.node, event.gpu)
        hist = self._gpus.get(key)
        if hist is None or ts - hist.incident_last_ms > p.incident_gap_ms:
            hist = self._open_incident(hist, ts)
            self._gpus[key] = hist

        action, severity, escalated, reason = self._candidate(entry, event, hist, ts)
        if entry.action in RESET_CLASS:
            hist.reset = True
        if event.xid not in hist.xids and len(hist.xids) < p.max_xids_per_gpu:
            hist.xids.append(event.xid)
        if action != "IGNORE":  # a stream of ignorable XIDs must not keep an incident open
            hist.incident_last_ms = max(hist.incident_last_ms, ts)

        raised = action_rank(action) > action_rank(hist.action)
        if raised:
            hist.action, hist.escalated, hist.cause_xid = action, escalated, event.xid
        # A more severe XID in the same incident (145 then 79) must reach on-call
        # even when the action stays: the alert's severity changes.
        severity_raised = (
            _SEVERITY_RANK[severity] > _SEVERITY_RANK[hist.severity] and action != "IGNORE"
        )
        if severity_raised:
            hist.severity = severity
        if raised and hist.action == "RESTART_APP" and not hist.retry_counted:
            self._step_retry(hist)
        elif action_rank(hist.action) > action_rank("RESTART_APP"):
            hist.retry_streak, hist.last_retry_ms, hist.retry_after_ms = 0, None, None

        if not raised and not severity_raised:
            reason = f"{_describe(entry, self.catalog)}; " + (
                "no action"
                if hist.action == "IGNORE"
                else f"incident since {hist.incident_start_ms} ms already at {hist.action} "
                f"(XID {hist.cause_xid})"
            )
        elif hist.action == "RESTART_APP" and hist.retry_after_ms is not None:
            reason += (
                f"; retry in {_duration(hist.retry_after_ms)} "
                f"(consecutive RESTART_APP #{hist.retry_streak})"
            )
        return XidDecision(
            node=event.node,
            gpu=event.gpu,
            xid=event.xid,
            name=entry.name,
            severity=hist.severity,
            action=hist.action,
            escalated=hist.escalated,
            reason=reason,
            ts_ms=ts,
            catalog_action=entry.action,
            incident_ts_ms=hist.incident_start_ms,
            changed=raised or severity_raised,
            retry_after_ms=hist.retry_after_ms if hist.action == "RESTART_APP" else None,
            substatus=entry.substatus,
            text=entry.text,
        )

    def _open_incident(self, old: _GpuHistory | None, ts: int) -> _GpuHistory:
        p = self.params
        new = _GpuHistory(incident_start_ms=ts, incident_last_ms=ts)
        if old is None:
            return new
        new.reset_before_ms = old.incident_start_ms if old.reset else old.reset_before_ms
        seen = dict(old.seen_before)
        for xid in old.xids:
            seen[xid] = old.incident_start_ms
        recent = sorted(((t, x) for x, t in seen.items() if ts - t <= p.window_ms), reverse=True)[
            : p.max_xids_per_gpu
        ]
        new.seen_before = {x: t for t, x in recent}
        if new.reset_before_ms is not None and ts - new.reset_before_ms > p.window_ms:
            new.reset_before_ms = None
        if old.last_retry_ms is not None and ts - old.last_retry_ms <= p.retry_streak_gap_ms:
            new.retry_streak, new.last_retry_ms = old.retry_streak, old.last_retry_ms
        return new

    def _candidate(
        self, entry: XidEntry, event: XidEvent, hist: _GpuHistory, ts: int
    ) -> tuple[str, Severity, bool, str]:
        p = self.params
        action, severity = entry.action, entry.severity
        reason = _describe(entry, self.catalog)
        before = hist.seen_before.get(event.xid)
        if (
            entry.repeat_action is not None
            and before is not None
            and ts - before <= p.window_ms
            and action_rank(entry.repeat_action) > action_rank(action)
        ):
            return (
                entry.repeat_action,
                "critical",
                True,
                f"{reason}; XID {event.xid} again {_duration(ts - before)} after the incident "
                f"at {before} ms → {entry.repeat_action}",
            )
        prev_reset = hist.reset_before_ms
        if (
            entry.action in RESET_CLASS
            and prev_reset is not None
            and ts - prev_reset <= p.window_ms
            and action_rank(p.repeated_reset_action) > action_rank(action)
        ):
            return (
                p.repeated_reset_action,
                "critical",
                True,
                f"{reason}; second reset-class incident within {_duration(p.window_ms)} "
                f"(previous at {prev_reset} ms, {_duration(ts - prev_reset)} earlier): the reset "
                f"did not fix the GPU → {p.repeated_reset_action}",
            )
        return action, severity, False, reason

    def _step_retry(self, hist: _GpuHistory) -> None:
        backoff = self.params.retry_backoff_ms
        hist.retry_streak += 1
        hist.last_retry_ms = hist.incident_start_ms
        hist.retry_counted = True
        hist.retry_after_ms = backoff[min(hist.retry_streak, len(backoff)) - 1]

    def prune(self, now_ms: int) -> int:
        """Forget GPUs quiet for longer than any rule looks back; return how many."""
        horizon = now_ms - self.params.memory_ms
        stale = [k for k, h in self._gpus.items() if h.incident_last_ms < horizon]
        for key in stale:
            del self._gpus[key]
        return len(stale)

    def decide_all(self, events: Iterable[XidEvent]) -> list[XidDecision]:
        """:meth:`decide` for each event in order."""
        return [self.decide(e) for e in events]

    def to_dict(self) -> dict[str, Any]:
        gpus = []
        for (node, gpu), h in sorted(self._gpus.items()):
            gpus.append(
                {
                    "node": node,
                    "gpu": gpu,
                    "incident_start_ms": h.incident_start_ms,
                    "incident_last_ms": h.incident_last_ms,
                    "action": h.action,
                    "severity": h.severity,
                    "escalated": h.escalated,
                    "cause_xid": h.cause_xid,
                    "reset": h.reset,
                    "xids": list(h.xids),
                    "retry_counted": h.retry_counted,
                    "retry_after_ms": h.retry_after_ms,
                    "reset_before_ms": h.reset_before_ms,
                    "seen_before": sorted([x, t] for x, t in h.seen_before.items()),
                    "retry_streak": h.retry_streak,
                    "last_retry_ms": h.last_retry_ms,
                }
            )
        return {"version": 1, "gpus": gpus}

    @classmethod
    def from_dict(
        cls,
        data: Mapping[str, Any],
        catalog: XidCatalog,
        params: EscalationParams | None = None,
    ) -> XidEscalator:
        if data.get("version") != 1:
            raise ValueError(f"unsupported XID escalation state version {data.get('version')!r}")
        esc = cls(catalog, params)
        for row in data.get("gpus", ()):
            action_rank(row["action"])
            severity = row["severity"]
            if severity not in _SEVERITY_RANK:
                raise ValueError(f"unknown severity in XID escalation state: {severity!r}")
            esc._gpus[(str(row["node"]), str(row["gpu"]))] = _GpuHistory(
                incident_start_ms=int(row["incident_start_ms"]),
                incident_last_ms=int(row["incident_last_ms"]),
                action=row["action"],
                severity=severity,
                escalated=bool(row["escalated"]),
                cause_xid=int(row["cause_xid"]),
                reset=bool(row["reset"]),
                xids=[int(x) for x in row["xids"]],
                retry_counted=bool(row["retry_counted"]),
                retry_after_ms=_opt_int(row.get("retry_after_ms")),
                reset_before_ms=_opt_int(row.get("reset_before_ms")),
                seen_before={int(x): int(t) for x, t in row.get("seen_before", ())},
                retry_streak=int(row["retry_streak"]),
                last_retry_ms=_opt_int(row.get("last_retry_ms")),
            )
        return esc


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _describe(entry: XidEntry, catalog: XidCatalog) -> str:
    sub = f" [{entry.substatus}]" if entry.substatus else ""
    if not entry.known:
        return (
            f"XID {entry.xid} is not in the {catalog.profile!r} catalog: "
            f"{entry.action} (default for unknown XIDs)"
        )
    return (
        f"XID {entry.xid}{sub} ({entry.name}): {entry.action} per the {catalog.profile!r} catalog"
    )


def _duration(ms: int) -> str:
    if ms >= HOUR_MS:
        return f"{ms / HOUR_MS:.1f} h"
    if ms >= MINUTE_MS:
        return f"{ms / MINUTE_MS:.0f} min"
    return f"{ms / 1000:.0f} s"
