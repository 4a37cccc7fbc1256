"""Create peerwatch's topics before anything subscribes to them.

Faust does not create an agent's source topic, and a topic auto-created by
the first produce gets the broker's default partition count; the frames topic
and the worker's table must agree on it, so both processes call this first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from streams.kafka.options import client_options, raise_if_login_refused
from streams.retry import RetryCallState, growing, retrying
from streams.settings import Settings
from streams.telemetry.logs import EventLog

log = EventLog("peerwatch.topics")


async def ensure_topics(
    settings: Settings,
    attempts: int | None = 30,
    on_unavailable: Callable[[], object] | None = None,
) -> None:
    """Create the frames, alerts, xid (and job attempts) topics if missing.

    Retries while the broker is unreachable: ``attempts`` times, or forever if None,
    calling ``on_unavailable`` after each failed attempt (a caller's error counter);
    a refused login raises ``KafkaLoginError`` at once.
    """
    names = [settings.topic_frames, settings.topic_alerts, settings.topic_xid]
    if settings.topic_job_attempts:  # keyed by group like the frames: the same partitions
        names.append(settings.topic_job_attempts)

    async def create_missing() -> None:
        admin = AIOKafkaAdminClient(**client_options(settings))
        try:
            await admin.start()
            existing = set(await admin.list_topics())
            missing = [n for n in names if n not in existing]
            if missing:
                new = [
                    NewTopic(n, settings.topic_partitions, settings.topic_replication)
                    for n in missing
                ]
                # another process may win the race to create them
                with contextlib.suppress(TopicAlreadyExistsError):
                    await admin.create_topics(new)
                log.info("topics_created", names=missing, partitions=settings.topic_partitions)
        except KafkaError:
            await raise_if_login_refused(settings)
            raise
        finally:
            await admin.close()

    def unavailable(attempt: RetryCallState) -> None:
        error = attempt.outcome.exception() if attempt.outcome else None
        log.warning("kafka_unavailable", attempt=attempt.attempt_number, error=error)
        if on_unavailable is not None:
            on_unavailable()

    try:
        await retrying(
            growing(0.5, 5.0), on=KafkaError, attempts=attempts, before_sleep=unavailable
        )(create_missing)
    except KafkaError as exc:
        raise ConnectionError(
            f"could not reach Kafka at {settings.broker_host_port} to create topics"
        ) from exc
