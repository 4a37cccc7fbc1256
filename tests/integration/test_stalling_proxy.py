"""streams.lab.chaos.proxy.StallingProxy: forwards, holds all while stalled, then delivers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from streams.lab.chaos.proxy import StallingProxy
from streams.lab.launchers import LOOPBACK


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[StallingProxy]:
    """A proxy in front of a loopback echo server."""
    server = await asyncio.start_server(echo, LOOPBACK, 0)
    proxy = StallingProxy(server.sockets[0].getsockname()[1])
    await proxy.start()
    yield proxy
    await proxy.stop()
    server.close()
    await server.wait_closed()


async def test_a_stalled_proxy_holds_bytes_until_it_resumes(proxy: StallingProxy) -> None:
    reader, writer = await asyncio.open_connection(LOOPBACK, proxy.port)
    writer.write(b"before")
    assert await asyncio.wait_for(reader.readexactly(6), 5) == b"before"
    proxy.stall()
    writer.write(b"during")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readexactly(6), 0.5)
    proxy.resume()
    assert await asyncio.wait_for(reader.readexactly(6), 5) == b"during"
    writer.close()


async def test_a_connection_made_while_stalled_is_accepted_but_silent(
    proxy: StallingProxy,
) -> None:
    """No refusal and no reset: the client only sees silence (its timeouts must act)."""
    proxy.stall()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(LOOPBACK, proxy.port), 5)
    writer.write(b"hello")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.readexactly(5), 0.5)
    proxy.resume()
    assert await asyncio.wait_for(reader.readexactly(5), 5) == b"hello"
    writer.close()
