"""The one delivery primitive of the sinks: a keyed, bounded, journaled outbox and its loop.

Both sinks (Alertmanager, Grafana) deliver the *latest state* of each alert:
a newer state of the same alert supersedes an undelivered older one, so an
outage of any length costs memory bounded by the number of distinct alerts
(and ``max_items``), and the other side receives exactly the current truth
when it is back. With a ``path`` the outbox is journaled (one JSON line per
change, replayed on open, compacted as it grows), so what a worker decided
before a crash or kill -9 is delivered after its restart. Lines are flushed to
the OS at once (they survive the process) but not fsynced (a power loss may
take the last ones).

``deliver_forever`` runs the loop: send the whole outbox as one batch when
woken; ``Outcome.RETRY`` (the other side is away) backs off exponentially with
full jitter up to ``backoff_max_s``; ``SENT`` and ``REJECTED`` (a 4xx: the
request is wrong, repeating it cannot help) take the batch out.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import fcntl
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from detectors.errors import PeerwatchError
from streams.retry import doubling, retrying
from streams.telemetry.logs import EventLog

__all__ = ["Outbox", "OutboxLocked", "Outcome", "alert_key", "deliver_forever", "open_outbox"]

log = EventLog("peerwatch.outbox")

Item = dict[str, Any]  # JSON-able


def alert_key(labels: Mapping[str, str]) -> str:
    """An alert's outbox key: its label set (its identity in Alertmanager), as one string."""
    return json.dumps(sorted(labels.items()), separators=(",", ":"))


def _journal_line(key: str, item: Item | None) -> str:
    return json.dumps({"k": key, "v": item}, separators=(",", ":")) + "\n"


class OutboxLocked(PeerwatchError, RuntimeError):
    """Another live process holds this outbox's journal (two workers sharing a data dir)."""


class Outcome(enum.Enum):
    SENT = "sent"
    RETRY = "retry"
    REJECTED = "rejected"


class Outbox:
    """Latest undelivered item per key; journaled to ``path`` when given."""

    def __init__(self, path: str | Path | None = None, *, max_items: int = 100_000) -> None:
        if max_items < 1:
            raise ValueError("max_items must be >= 1")
        self.max_items = max_items
        self.dropped = 0  # items dropped because the outbox was full
        self._items: dict[str, Item] = {}
        self._path = Path(path) if path is not None else None
        self._journal_lines = 0
        self._file: Any = None
        self._lock: Any = None
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._lock = open(self._path.with_suffix(".lock"), "w")  # noqa: SIM115 (held)
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                self._lock.close()
                raise OutboxLocked(f"{self._path} is in use by another process") from None
            self._replay()
            self._file = open(self._path, "a", encoding="utf-8")  # noqa: SIM115 (kept open)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def items(self) -> dict[str, Item]:
        """A copy of the pending items (the batch to send)."""
        return dict(self._items)

    def put(self, key: str, item: Item) -> None:
        """Queue ``item`` as the latest state of ``key`` (replacing an undelivered one)."""
        if key not in self._items and len(self._items) >= self.max_items:
            oldest = next(iter(self._items))
            del self._items[oldest]
            self._record(oldest, None)
            self.dropped += 1
            log.error("outbox_full", dropped_key=oldest, max_items=self.max_items)
        self._items.pop(key, None)  # re-insert: insertion order is age
        self._items[key] = item
        self._record(key, item)

    def done(self, batch: Mapping[str, Item]) -> None:
        """Take out the items of a delivered (or rejected) batch not superseded meanwhile."""
        for key, item in batch.items():
            if self._items.get(key) is item:
                del self._items[key]
                self._record(key, None)
        self._maybe_compact()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None

    # --- the journal ----------------------------------------------------------------------------

    def _record(self, key: str, item: Item | None) -> None:
        if self._file is None:
            return
        self._file.write(_journal_line(key, item))
        self._file.flush()
        self._journal_lines += 1

    def _replay(self) -> None:
        assert self._path is not None
        if not self._path.exists():
            return
        with open(self._path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                self._journal_lines += 1
                try:
                    entry = json.loads(line)
                    key, item = entry["k"], entry["v"]
                except (ValueError, KeyError, TypeError):
                    # a line cut short by a kill: everything before it is intact
                    log.warning("outbox_journal_line_skipped", path=self._path, line=number)
                    continue
                self._items.pop(key, None)
                if item is not None:
                    self._items[key] = item
        while len(self._items) > self.max_items:
            del self._items[next(iter(self._items))]
            self.dropped += 1
        log.info("outbox_restored", path=self._path, pending=len(self._items))
        self._compact()

    def _maybe_compact(self) -> None:
        if self._file is not None and self._journal_lines > 4 * len(self._items) + 1000:
            self._file.close()
            self._compact()
            self._file = open(self._path, "a", encoding="utf-8")  # type: ignore[arg-type]  # noqa: SIM115

    def _compact(self) -> None:
        """Rewrite the journal as just the pending items (write aside, then rename)."""
        assert self._path is not None
        tmp = self._path.with_suffix(self._path.suffix + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for key, item in self._items.items():
                f.write(_journal_line(key, item))
        os.replace(tmp, self._path)
        self._journal_lines = len(self._items)


async def deliver_forever(
    outbox: Outbox,
    send: Callable[[dict[str, Item]], Awaitable[Outcome]],
    wake: asyncio.Event,
    *,
    backoff_min_s: float = 0.5,
    backoff_max_s: float = 30.0,
    before_send: Callable[[], None] = lambda: None,
    timeout_s: Callable[[], float | None] = lambda: None,
) -> None:
    """Deliver ``outbox`` forever: on ``wake``, or every ``timeout_s()`` seconds (None: only on
    wake); ``before_send`` may queue more first (re-sends). Backoff with full jitter on RETRY;
    each attempt sends what the outbox holds by then."""
    if len(outbox):
        wake.set()  # what a restarted worker's journal holds goes out now, not on the next tick
    batch: dict[str, Item] = {}

    async def send_all() -> Outcome:
        nonlocal batch
        batch = outbox.items()
        return await send(batch)

    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), timeout=timeout_s())
        wake.clear()
        before_send()
        while len(outbox):
            await retrying(
                doubling(backoff_min_s, backoff_max_s, jitter=True),
                until=lambda outcome: outcome is not Outcome.RETRY,
            )(send_all)
            outbox.done(batch)


def open_outbox(directory: Path | None, name: str) -> Outbox:
    """``name``'s journaled outbox in ``directory``; in memory (logged) when it cannot be."""
    if directory is None:
        return Outbox()
    try:
        return Outbox(Path(directory) / f"{name}.jsonl")
    except (OutboxLocked, OSError) as exc:
        log.warning("outbox_in_memory", sink=name, reason=str(exc))
        return Outbox()
