"""A kernel-log XID that reaches the worker between two job events is a cause for the next
failure: the advice names it though the scheduler's ``failed`` event carries no ``xids``.
(The job events' retry table once overwrote it: the advisor restored the state it had written
at the previous job event, from before the XID.) The table holds the XID too, so a worker
that crashed after it and a new one restored from the changelog advise the same."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from streams.records import XidLine
from tests.integration.harness import read_topic, wait_for
from tests.integration.test_job_advice import NODES, advice_out, jobs_deployment

LINE = "[ 8123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python, GPU has fallen off the bus."  # noqa: E501


@pytest.mark.long
@pytest.mark.parametrize("crash", [False, True], ids=["same-worker", "after-a-crash"])
async def test_a_log_xid_between_job_events_is_the_failures_cause(
    kafka_bootstrap: str, tmp_path: Path, crash: bool
) -> None:
    deployment, jobs = jobs_deployment(kafka_bootstrap, tmp_path)
    group = deployment.job
    attempt = {"job_id": "s1", "name": "llm", "attempt": 1, "group": group, "nodes": NODES}
    xid = XidLine(group=group, node="n2", ts=3_590_000, line=LINE)
    failed = {**attempt, "state": "failed", "ts": 3_600_000, "exit_reason": "nccl",
              "pool": [*NODES, "n4"]}  # fmt: skip
    worker = deployment.worker().start()
    log_path = tmp_path / "worker.log"
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()

    def logged(text: str) -> Callable[[], Awaitable[bool]]:
        async def seen() -> bool:
            return text in log_path.read_text()

        return seen

    try:
        for event in [
            {**attempt, "state": "running", "ts": 1_000, "pool": [*NODES, "n4"]},
            {**attempt, "state": "training", "ts": 60_000},
        ]:
            await producer.send_and_wait(jobs, json.dumps(event).encode(), key=group.encode())
        await wait_for(logged("state=training"), 60, "the training event")
        topic_xid = deployment.env["PEERWATCH_TOPIC_XID"]
        await producer.send_and_wait(topic_xid, xid.dumps(serializer="json"), key=group.encode())
        await wait_for(logged("xid_line node=n2 xid=79"), 60, "the log XID")
        if crash:
            changelog = f"{deployment.env['PEERWATCH_APP_ID']}-retry-state-changelog"

            async def xid_written() -> bool:
                records = await read_topic(kafka_bootstrap, changelog)
                return any(r and r.get("xids") for r in records)

            await wait_for(xid_written, 60, "the log XID in the retry table's changelog")
            worker.kill()
            worker = deployment.worker().start()  # restores the table from its changelog
        await producer.send_and_wait(jobs, json.dumps(failed).encode(), key=group.encode())
        _, advice = await advice_out(kafka_bootstrap, deployment)
    finally:
        await producer.stop()
        worker.stop()
    assert [(a.advisor, a.kind, a.nodes) for a in advice] == [("retry", "exclude_nodes", ("n2",))]
    figures = dict(advice[0].figures)
    assert str(figures["xids"]).startswith("79@n2:")  # the log XID, the failure's cause
    assert figures["excluded"] == "n2"
