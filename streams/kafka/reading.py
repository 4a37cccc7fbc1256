"""Read what a topic holds now: every assigned partition up to its end offset as of the
call, so a reader of a finished topic stops at its last record instead of waiting out a
silence (and a record acknowledged before the call is always among those read)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiokafka import AIOKafkaConsumer, ConsumerRecord


async def records_to_end(
    consumer: AIOKafkaConsumer, timeout_s: float = 30.0
) -> AsyncIterator[ConsumerRecord]:
    """The records of ``consumer``'s assigned partitions up to their end offsets now, in
    each partition's order; ``TimeoutError`` if that takes more than ``timeout_s``."""
    ends = await consumer.end_offsets(list(consumer.assignment()))
    left = {tp: end for tp, end in ends.items() if end > 0}
    async with asyncio.timeout(timeout_s):
        while left:
            batch = await consumer.getmany(*left, timeout_ms=1_000)
            for messages in batch.values():
                for message in messages:
                    yield message
            for tp in list(left):
                if await consumer.position(tp) >= left[tp]:
                    del left[tp]
