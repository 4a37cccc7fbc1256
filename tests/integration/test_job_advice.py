"""A job's failed attempt on the job lifecycle topic of a real worker process comes back as an
advice record on the alerts topic: XID 79 on one node, so exclude it and take a spare."""

from __future__ import annotations

import json
from pathlib import Path

from aiokafka import AIOKafkaProducer

from streams.sinks.advice import Advice, decode_advice
from tests.integration.harness import Deployment, metric, read_topic, wait_for

NODES = ["n1", "n2", "n3"]


def jobs_deployment(kafka_bootstrap: str, tmp_path: Path) -> tuple[Deployment, str]:
    """A deployment whose worker reads a job lifecycle topic of its own (named second)."""
    deployment = Deployment.new(kafka_bootstrap, "", tmp_path)
    jobs = deployment.alerts_topic.replace("-alerts", "-jobs")
    deployment.env["PEERWATCH_TOPIC_JOB_ATTEMPTS"] = jobs
    return deployment, jobs


async def advice_out(
    kafka_bootstrap: str, deployment: Deployment
) -> tuple[list[dict], list[Advice]]:
    """Once the worker counted an advice and its record is on the alerts topic (published
    after the count): the topic's records, and the advice of them."""

    async def advised() -> bool:
        return await metric(deployment.metrics_port, "peerwatch_advice_total") >= 1

    await wait_for(advised, 60, "the retry advice")

    async def on_the_topic() -> tuple[list[dict], list[Advice]] | None:
        records = await read_topic(kafka_bootstrap, deployment.alerts_topic)
        advice = [a for r in records if (a := decode_advice(json.dumps(r).encode()))]
        return (records, advice) if advice else None

    found = await wait_for(on_the_topic, 30, "the advice record on the alerts topic")
    assert found is not None
    return found


async def test_a_failed_attempt_in_gives_an_advice_record_out(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    deployment, jobs = jobs_deployment(kafka_bootstrap, tmp_path)
    group = deployment.job
    attempt = {"job_id": "s1", "name": "llm", "attempt": 1, "group": group, "nodes": NODES}
    events = [
        {**attempt, "state": "running", "ts": 1_000, "pool": [*NODES, "n4"]},
        {**attempt, "state": "training", "ts": 60_000},
        {**attempt, "state": "failed", "ts": 3_600_000, "exit_reason": "xid",
         "xids": [{"node": "n2", "xid": 79}], "pool": [*NODES, "n4"]},
    ]  # fmt: skip
    worker = deployment.worker().start()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(jobs, b"{not json", key=group.encode())  # logged, skipped
        for event in events:
            await producer.send_and_wait(jobs, json.dumps(event).encode(), key=group.encode())
        records, advice = await advice_out(kafka_bootstrap, deployment)
    finally:
        await producer.stop()
        worker.stop()
    assert [(a.advisor, a.kind, a.nodes, a.action) for a in advice] == [
        ("retry", "exclude_nodes", ("n2",), "EXCLUDE_AND_RETRY")
    ]
    figures = dict(advice[0].figures)
    assert (figures["delay_s"], figures["available"], figures["gang"]) == (600.0, 3, 3)
    assert advice[0].group == group and records[0]["record"] == "advice"
    log = (tmp_path / "worker.log").read_text()
    assert "job_event_rejected" in log and "advice_given advisor=retry kind=exclude_nodes" in log
