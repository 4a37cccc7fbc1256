"""One backoff policy for every wait on something away: Kafka, Alertmanager, Grafana, a
failed background task, a history server's chunk (the backtest, which blocks). Built on
tenacity; the call sites say only what to retry and how long the waits may grow.

A retrying block ends at its first success, so a block per connection (or per
batch) starts every outage at the shortest wait again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    stop_never,
    wait_chain,
    wait_exponential,
    wait_fixed,
    wait_incrementing,
    wait_none,
    wait_random_exponential,
)
from tenacity.wait import wait_base

__all__ = ["RetryCallState", "doubling", "fixed", "growing", "retrying", "retrying_blocking"]


def doubling(first_s: float, max_s: float, *, jitter: bool = False) -> wait_base:
    """``first_s``, twice that, ... up to ``max_s``; with ``jitter`` a uniform draw below
    each ("full jitter", so that many clients do not retry in step)."""
    if jitter:
        return wait_random_exponential(multiplier=first_s, max=max_s)
    return wait_exponential(multiplier=first_s, min=first_s, max=max_s)


def growing(step_s: float, max_s: float) -> wait_base:
    """``step_s``, ``2 * step_s``, ... up to ``max_s``."""
    return wait_incrementing(start=step_s, increment=step_s, max=max_s)


def fixed(*waits_s: float) -> wait_base:
    """Exactly these waits, in order (none: retry at once)."""
    return wait_chain(*(wait_fixed(w) for w in waits_s)) if waits_s else wait_none()


Errors = type[BaseException] | tuple[type[BaseException], ...]


def retrying(
    wait: wait_base,
    *,
    on: Errors | None = None,
    until: Callable[[Any], bool] | None = None,
    attempts: int | None = None,
    before_sleep: Callable[[RetryCallState], Awaitable[None] | None] | None = None,
) -> AsyncRetrying:
    """Retry while the attempt raises one of ``on``, or while its result fails ``until``;
    forever unless ``attempts`` is given (then the last error is raised as it was).
    ``before_sleep`` sees each failed attempt (to log it, count it, mark a peer down)."""
    return AsyncRetrying(**_policy(wait, on, until, attempts), before_sleep=before_sleep)


def retrying_blocking(
    wait: wait_base,
    *,
    on: Errors | None = None,
    until: Callable[[Any], bool] | None = None,
    attempts: int | None = None,
    before_sleep: Callable[[RetryCallState], None] | None = None,
) -> Retrying:
    """:func:`retrying` for code that blocks (it sleeps the thread between attempts)."""
    return Retrying(**_policy(wait, on, until, attempts), before_sleep=before_sleep)


def _policy(
    wait: wait_base,
    on: Errors | None,
    until: Callable[[Any], bool] | None,
    attempts: int | None,
) -> dict[str, Any]:
    if (on is None) == (until is None):
        raise ValueError("retry on exceptions (on=) or on results (until=), one of them")
    condition = (
        retry_if_exception_type(on)
        if on is not None
        else retry_if_result(lambda result: not until(result))  # type: ignore[misc]
    )
    return {
        "wait": wait,
        "retry": condition,
        "stop": stop_never if attempts is None else stop_after_attempt(attempts),
        "reraise": True,
    }
