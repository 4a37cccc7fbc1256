"""A loopback TCP proxy that can stall: a network that stops forwarding without a reset.

While stalled, connections are still accepted and bytes still arrive, but
nothing is passed on in either direction: the client sees a peer that is
there and says nothing (its timeouts fire, no connection is refused). When
the stall ends, what was held is forwarded in order, as TCP would deliver it
once a partition heals.

    proxy = StallingProxy(target_port=9093)
    await proxy.start()          # proxy.port forwards to 127.0.0.1:9093
    proxy.stall(); ...; proxy.resume()
"""

from __future__ import annotations

import asyncio
import contextlib

from streams.lab.launchers import LOOPBACK

CHUNK = 65_536


class StallingProxy:
    def __init__(self, target_port: int, port: int = 0) -> None:
        self.target_port = target_port
        self.port = port
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()
        self.connections = 0  # accepted since start

    @property
    def stalled(self) -> bool:
        return not self._flowing.is_set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, LOOPBACK, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for task in list(self._pipes):
            task.cancel()
        for task in list(self._pipes):
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        if task is not None:
            self._pipes.add(task)
        try:
            await self._flowing.wait()  # a stalled network completes no new connection upstream
            try:
                target_r, target_w = await asyncio.open_connection(LOOPBACK, self.target_port)
            except OSError:
                return  # the target is down: the client sees the connection close
            try:
                await asyncio.gather(self._pipe(client_r, target_w), self._pipe(target_r, client_w))
            finally:
                target_w.close()
        finally:
            client_w.close()
            if task is not None:
                self._pipes.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(CHUNK):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()
