"""Which groups this worker owns: the frames partitions Kafka assigned it, and the
partition each group arrived on.

A rebalance tells the worker its new assignment between two agent steps; the groups
on partitions it lost are forgotten by the agent before its next frame
(``take_moved``), never under a bucket half processed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class Ownership:
    def __init__(self, frames_topic: str) -> None:
        self._topic = frames_topic
        self._owned: set[int] = set()  # frames partitions assigned to this worker
        self._lost: set[int] = set()  # partitions taken away, their groups not forgotten yet
        self._frames: dict[str, int] = {}  # group -> the frames partition it arrives on
        # group -> the partition of its retry state (a job's chain: it may have no frames)
        self._retries: dict[str, int] = {}

    def _partitions(self, tps: Iterable[Any]) -> set[int]:
        return {tp.partition for tp in tps if tp.topic == self._topic}

    def assigned(self, tps: Iterable[Any]) -> int:
        """The new assignment; how many frames partitions it holds."""
        now = self._partitions(tps)
        self._lost |= self._owned - now
        self._owned = now
        return len(now)

    def revoked(self, tps: Iterable[Any]) -> list[str]:
        """The groups whose frames arrived on the partitions revoked."""
        gone = self._partitions(tps)
        return [g for g, p in self._frames.items() if p in gone]

    def frames_from(self, group: str, partition: int) -> None:
        self._frames[group] = partition

    def retries_from(self, group: str, partition: int) -> None:
        self._retries[group] = partition

    def ended(self, group: str) -> None:
        self._frames.pop(group, None)

    @property
    def moved(self) -> bool:
        """A rebalance took partitions away whose groups are still held here."""
        return bool(self._lost)

    def take_moved(self) -> tuple[list[str], list[str]]:
        """(groups, retry chains) on the partitions lost, now forgotten here."""
        groups = [g for g, p in self._frames.items() if p in self._lost]
        retries = [g for g, p in self._retries.items() if p in self._lost]
        for group in groups:
            del self._frames[group]
        for group in retries:
            del self._retries[group]
        self._lost.clear()
        return groups, retries
