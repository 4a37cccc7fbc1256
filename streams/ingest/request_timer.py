"""The ingest's request-duration histogram, as an aiohttp middleware."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import Histogram

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def request_timer(histogram: Histogram) -> Middleware:
    """Observe every request's time to answer, by route (bounded: unknown paths are one
    ``unmatched``) and status code, including the 4xx/5xx raised as HTTP exceptions."""

    @web.middleware
    async def timed(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        code = 500
        try:
            response = await handler(request)
            code = response.status
            return response
        except web.HTTPException as exc:
            code = exc.status
            raise
        finally:
            resource = request.match_info.route.resource
            route = resource.canonical if resource is not None else "unmatched"
            histogram.labels(handler=route, code=str(code)).observe(time.perf_counter() - started)

    return timed
