"""The one backoff policy: waits that double (or grow) to a bound, retry on errors or on
results, a bounded number of attempts raising the last error as it was."""

from __future__ import annotations

import pytest
from tenacity import RetryCallState

from streams.retry import doubling, fixed, growing, retrying, retrying_blocking


def _waits(wait, n: int) -> list[float]:
    out = []
    for number in range(1, n + 1):
        state = RetryCallState(None, None, (), {})
        state.attempt_number = number
        out.append(wait(state))
    return out


def test_doubling_starts_at_the_first_wait_and_stops_at_the_bound() -> None:
    assert _waits(doubling(0.5, 3.0), 5) == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_jitter_draws_below_each_doubled_wait() -> None:
    for bound, wait in zip(
        [0.5, 1.0, 2.0, 3.0], _waits(doubling(0.5, 3.0, jitter=True), 4), strict=True
    ):
        assert 0.0 <= wait <= bound


def test_growing_adds_one_step_per_attempt() -> None:
    assert _waits(growing(0.5, 1.2), 4) == [0.5, 1.0, 1.2, 1.2]


async def test_errors_are_retried_until_the_attempt_works() -> None:
    calls, seen = [], []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("away")
        return "ok"

    policy = retrying(
        doubling(0.001, 0.002),
        on=ConnectionError,
        before_sleep=lambda s: seen.append(s.attempt_number),
    )
    assert await policy(flaky) == "ok"
    assert len(calls) == 3 and seen == [1, 2]


async def test_results_are_retried_until_they_pass() -> None:
    answers = iter(["retry", "retry", "sent"])

    async def send() -> str:
        return next(answers)

    assert await retrying(doubling(0.001, 0.002), until=lambda r: r == "sent")(send) == "sent"


async def test_the_last_error_comes_out_as_it_was_after_the_attempts() -> None:
    async def down() -> None:
        raise ConnectionError("still away")

    with pytest.raises(ConnectionError, match="still away"):
        await retrying(doubling(0.001, 0.002), on=ConnectionError, attempts=2)(down)


async def test_other_errors_are_not_retried() -> None:
    calls = []

    async def broken() -> None:
        calls.append(1)
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        await retrying(doubling(0.001, 0.002), on=ConnectionError)(broken)
    assert calls == [1]


def test_exactly_one_retry_condition() -> None:
    with pytest.raises(ValueError):
        retrying(doubling(1, 2))
    with pytest.raises(ValueError):
        retrying(doubling(1, 2), on=OSError, until=bool)


def test_blocking_retries_wait_the_fixed_waits_then_raise_the_last_error() -> None:
    calls, waited = [], []

    def down() -> None:
        calls.append(1)
        raise ConnectionError(f"away {len(calls)}")

    policy = retrying_blocking(
        fixed(0.001, 0.002),
        on=ConnectionError,
        attempts=3,
        before_sleep=lambda state: waited.append(state.next_action.sleep),  # type: ignore[union-attr]
    )
    with pytest.raises(ConnectionError, match="away 3"):
        policy(down)
    assert len(calls) == 3 and waited == [0.001, 0.002]


def test_no_fixed_waits_retries_at_once() -> None:
    answers = iter([ConnectionError("blip"), "ok"])

    def flaky() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert retrying_blocking(fixed(), on=ConnectionError, attempts=2)(flaky) == "ok"
