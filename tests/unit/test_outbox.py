"""streams.sinks.outbox: latest state per key, bounded, journaled across restarts, one loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from streams.sinks.outbox import Outbox, OutboxLocked, Outcome, deliver_forever


def test_a_newer_state_supersedes_an_undelivered_one() -> None:
    box = Outbox()
    box.put("a", {"status": "firing"})
    box.put("a", {"status": "resolved"})
    assert box.items() == {"a": {"status": "resolved"}}


def test_done_keeps_what_was_superseded_while_sending() -> None:
    box = Outbox()
    box.put("a", {"v": 1})
    batch = box.items()
    box.put("a", {"v": 2})  # decided while the batch was on the wire
    box.done(batch)
    assert box.items() == {"a": {"v": 2}}


def test_a_full_outbox_drops_its_oldest_and_counts_it() -> None:
    box = Outbox(max_items=2)
    for key in "abc":
        box.put(key, {"k": key})
    assert list(box.items()) == ["b", "c"] and box.dropped == 1


def test_what_was_pending_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "outbox" / "am.jsonl"
    box = Outbox(path)
    box.put("a", {"v": 1})
    box.put("b", {"v": 2})
    box.done({"a": box.items()["a"]})
    box.put("c", {"v": 3})
    box.close()  # the process dies here (a kill -9 leaves the same flushed lines)
    again = Outbox(path)
    assert again.items() == {"b": {"v": 2}, "c": {"v": 3}}


def test_a_line_cut_short_by_a_kill_loses_only_itself(tmp_path: Path) -> None:
    path = tmp_path / "am.jsonl"
    box = Outbox(path)
    box.put("a", {"v": 1})
    box.close()
    with path.open("a") as f:
        f.write('{"k": "b", "v": {"v"')  # the kill came mid-line
    assert Outbox(path).items() == {"a": {"v": 1}}


def test_the_journal_is_compacted_as_it_grows(tmp_path: Path) -> None:
    path = tmp_path / "am.jsonl"
    box = Outbox(path)
    for i in range(3000):
        box.put("a", {"v": i})
        box.done(box.items())
    box.put("last", {"v": 0})
    assert len(path.read_text().splitlines()) < 1100
    box.close()
    assert Outbox(path).items() == {"last": {"v": 0}}


def test_two_processes_cannot_share_one_journal(tmp_path: Path) -> None:
    path = tmp_path / "am.jsonl"
    first = Outbox(path)
    with pytest.raises(OutboxLocked):
        Outbox(path)
    first.close()
    Outbox(path).close()  # free again


async def test_the_loop_retries_with_backoff_and_takes_out_what_was_sent() -> None:
    box = Outbox()
    box.put("a", {"v": 1})
    outcomes = [Outcome.RETRY, Outcome.RETRY, Outcome.SENT]
    sent: list[dict] = []

    async def send(batch: dict) -> Outcome:
        sent.append(batch)
        return outcomes.pop(0)

    wake = asyncio.Event()
    wake.set()
    task = asyncio.create_task(
        deliver_forever(box, send, wake, backoff_min_s=0.01, backoff_max_s=0.02)
    )
    for _ in range(200):
        if not len(box):
            break
        await asyncio.sleep(0.01)
    task.cancel()
    assert len(sent) == 3 and not len(box)


async def test_a_rejected_batch_is_taken_out_not_retried() -> None:
    box = Outbox()
    box.put("a", {"v": 1})
    calls = 0

    async def send(batch: dict) -> Outcome:
        nonlocal calls
        calls += 1
        return Outcome.REJECTED

    wake = asyncio.Event()
    wake.set()
    task = asyncio.create_task(deliver_forever(box, send, wake))
    for _ in range(100):
        if not len(box):
            break
        await asyncio.sleep(0.01)
    task.cancel()
    assert calls == 1 and not len(box)
