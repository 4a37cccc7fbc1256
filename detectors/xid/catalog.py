"""The XID catalog: XID (and, for some codes, a decoded sub-status) → :class:`XidEntry`.

An entry holds name, severity, action in NVIDIA's resolution buckets and
operator text. The catalog is built from plain dicts — the parsed ``xid.toml``
with its profiles and an optional operator override (the shell reads the
file) — so the mapping is data, not code branches. Unknown action or severity
names raise ``ValueError`` naming the entry.

Sub-status keys are ``":"``-joined parts, most general first, and a lookup
falls back by dropping the last part (the kernel-log parser builds them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from detectors.errors import CatalogError
from detectors.xid.actions import ACTIONS, SEVERITIES, SEVERITY_RANK, Severity, is_action

__all__ = ["XidCatalog", "XidEntry"]


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
            raise CatalogError(f"{where}: xid must be an int >= 0")
        if self.severity not in SEVERITY_RANK:
            raise CatalogError(f"{where}: unknown severity {self.severity!r}; known: {SEVERITIES}")
        for name in ("action", "repeat_action"):
            value = getattr(self, name)
            if value is not None and not is_action(value):
                raise CatalogError(
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
            raise CatalogError(
                f"profile {self.profile!r}: the unknown-XID entry must have known=False"
            )
        for xid, entry in self.entries.items():
            if entry.xid != xid or entry.substatus is not None:
                raise CatalogError(f"profile {self.profile!r}: entry for xid {xid} is {entry}")

    def lookup(self, xid: int, substatus: str | None = None) -> XidEntry:
        """The entry for ``xid``, refined by ``substatus`` when the catalog has a match.

        ``substatus`` parts are tried most specific first (``a:b:c``, ``a:b``,
        ``a``), case-insensitively; without a match the XID's own entry is
        returned, and for an XID without an entry the catalog's unknown entry.
        """
        if isinstance(xid, bool) or not isinstance(xid, int) or xid <= 0:
            raise CatalogError(f"an XID is an int >= 1, got {xid!r}")
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
            raise CatalogError("XID catalog data must be a table")
        extra = set(data) - {"profiles"}
        if extra:
            raise CatalogError(f"XID catalog: unknown top-level key(s) {sorted(extra)}")
        profiles = data.get("profiles")
        if not isinstance(profiles, Mapping) or not profiles:
            raise CatalogError("XID catalog: no [profiles.<name>] tables")
        chain: list[str] = []
        name: str | None = profile
        while name is not None:
            if name in chain:
                raise CatalogError(f"XID profile {name!r} extends itself: {' -> '.join(chain)}")
            if name not in profiles:
                known = ", ".join(sorted(profiles))
                raise CatalogError(f"unknown XID profile {name!r}; known: {known}")
            chain.append(name)
            body = profiles[name]
            if not isinstance(body, Mapping):
                raise CatalogError(f"profile {name!r}: must be a table")
            parent = body.get("extends")
            if parent is not None and not isinstance(parent, str):
                raise CatalogError(f"profile {name!r}: extends must be a profile name")
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
            raise CatalogError(f"{where}: must be a table")
        extra = set(body) - allowed
        if extra:
            raise CatalogError(
                f"{where}: unknown key(s) {sorted(extra)}; allowed: {sorted(allowed)}"
            )
        description = body.get("description")
        if description is not None:
            self.description = _string(description, f"{where}: description")
        unknown = body.get("unknown")
        if unknown is not None:
            self.unknown.update(_fields(unknown, f"{where} unknown", _ENTRY_FIELDS))
        xids = body.get("xid", {})
        if not isinstance(xids, Mapping):
            raise CatalogError(f"{where}: xid must be a table of [xid.<code>] entries")
        for key, raw in xids.items():
            xid = _xid_key(key, where)
            at = f"{where} xid {xid}"
            fields = _fields(raw, at, _XID_FIELDS)
            subs = fields.pop("substatus", None)
            inherit = fields.pop("inherit_substatus", True)
            if not isinstance(inherit, bool):
                raise CatalogError(f"{at}: inherit_substatus must be true or false")
            self.xids.setdefault(xid, {}).update(fields)
            self.origin[xid] = at
            table = self.subs.setdefault(xid, {})
            if not inherit:
                table.clear()
            if subs is None:
                continue
            if not isinstance(subs, Mapping):
                raise CatalogError(f'{at}: substatus must be a table of [substatus."<key>"]')
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
            raise CatalogError(f"{where}: no {required}")
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
        raise CatalogError(f"{where}: {exc}") from None


def _fields(raw: object, where: str, allowed: frozenset[str]) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise CatalogError(f"{where}: must be a table")
    extra = set(raw) - allowed
    if extra:
        raise CatalogError(f"{where}: unknown field(s) {sorted(extra)}; allowed: {sorted(allowed)}")
    out = dict(raw)
    for name in ("name", "text", "note", "severity", "action", "repeat_action"):
        if name in out:
            _string(out[name], f"{where}: {name}")
    if "severity" in out and out["severity"] not in SEVERITY_RANK:
        raise CatalogError(f"{where}: unknown severity {out['severity']!r}; known: {SEVERITIES}")
    if "action" in out and not is_action(out["action"]):
        raise CatalogError(
            f"{where}: unknown action {out['action']!r}; known: {', '.join(ACTIONS)}, "
            "WORKFLOW_<NAME>"
        )
    if out.get("repeat_action") and not is_action(out["repeat_action"]):
        raise CatalogError(f"{where}: unknown repeat_action {out['repeat_action']!r}")
    return out


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise CatalogError(f"{where} must be a string, got {value!r}")
    return value


def _xid_key(key: object, where: str) -> int:
    text = str(key).strip()
    if isinstance(key, bool) or not text.isascii() or not text.isdigit() or int(text) < 1:
        raise CatalogError(f"{where}: XID keys are integers >= 1, got {key!r}")
    return int(text)


def _substatus_key(key: object, where: str) -> str:
    if not isinstance(key, str):
        raise CatalogError(f"{where}: substatus keys are strings, got {key!r}")
    parts = [p.strip() for p in key.split(":")]
    if not all(parts):
        raise CatalogError(f"{where}: substatus key {key!r} has an empty part")
    return ":".join(parts)
