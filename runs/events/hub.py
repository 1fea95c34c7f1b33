"""A web process's one Redis pub/sub connection (`Hub`), shared by all its streams, and its inbox.

The stream of a submit (`stream=true`) needs neither the subscription nor the first read: the hub listens on
an inbox of its process from its start, the submit names that inbox on the run (`stream_inbox`) once the hub
has it, and every event of the run is published there too. Whatever reaches the inbox before the stream asks
for it is kept for it (for `UNCLAIMED_SECONDS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid

import hiredis
import redis
import redis.asyncio

from agentos_project.core import resp
from agentos_project.core.conf import current

from . import publish, pubsub
from .backlog import Backlog
from .history import Buffered

log = logging.getLogger("agentos.streams")
RESYNC = b""  # put in every queue when the pub/sub connection had a gap
SUBSCRIBE_TIMEOUT = 5.0
CONNECT_TIMEOUT = 2.0
UNCLAIMED_SECONDS = 30.0


class Hub:
    """The process's pub/sub connection, shared by its streams, with its inbox; plus a client for buffer reads."""

    def __init__(self, url: str) -> None:
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            url, socket_connect_timeout=2, max_connections=64, timeout=SUBSCRIBE_TIMEOUT
        )  # a burst of resumes waits for a connection rather than failing
        self.redis = redis.asyncio.Redis(connection_pool=pool)
        key = uuid.uuid4().hex
        self.inbox = publish.inbox(key)
        self.name = f"agentos-hub-{key}"  # the pub/sub connection's, as CLIENT LIST shows it
        self._url = url
        self._writer: asyncio.StreamWriter | None = None  # the pub/sub connection's, while it is up
        self._tried = asyncio.Event()  # the first connection has been tried
        self._queues: dict[str, set[Backlog]] = {}
        self._confirmed: dict[str, asyncio.Event] = {}
        self._direct: dict[str, Backlog] = {}  # run id → the queue of the stream that reads it from the inbox
        self._unclaimed: dict[str, tuple[float, list[bytes]]] = {}  # run id → (first arrival, its inbox messages)
        self._inbox_channel = self.inbox.encode()
        self._reader: asyncio.Task | None = None

    async def _start(self) -> None:
        """Start reading (once); return when the first connection has been tried."""
        if self._reader is None:
            self._reader = asyncio.create_task(self._read(), name="agentos-stream-hub")
        if not self._tried.is_set():
            async with asyncio.timeout(SUBSCRIBE_TIMEOUT):
                await self._tried.wait()

    async def start(self) -> None:
        """Listen from now on (the inbox is offered to submits once Redis has confirmed it)."""
        await self._start()

    @contextlib.asynccontextmanager
    async def listening(self, channel: str):
        """A queue of the raw events published on `channel` from the moment the block starts."""
        await self._start()
        queue = Backlog()
        listeners = self._queues.setdefault(channel, set())
        listeners.add(queue)
        try:
            if len(listeners) == 1:
                self._confirmed[channel] = asyncio.Event()
                self._send("SUBSCRIBE", channel)
            async with asyncio.timeout(SUBSCRIBE_TIMEOUT):
                await self._confirmed[channel].wait()
            yield queue
        finally:
            listeners.discard(queue)
            if not listeners and self._queues.get(channel) is listeners:
                del self._queues[channel]
                self._confirmed.pop(channel, None)
                with contextlib.suppress(redis.RedisError):
                    self._send("UNSUBSCRIBE", channel)

    def _send(self, *words: str) -> None:
        if self._writer is None or self._writer.is_closing():
            raise redis.ConnectionError("the stream hub has no connection to Redis")
        self._writer.write(resp.command(*words))

    @contextlib.contextmanager
    def from_inbox(self, run_id: str):
        """A queue of the raw events of `run_id` that reach the inbox, those that came before included."""
        queue = Backlog()
        for message in self._unclaimed.pop(run_id, (0.0, []))[1]:
            queue.offer(message)
        self._direct[run_id] = queue
        try:
            yield queue
        finally:
            if self._direct.get(run_id) is queue:
                del self._direct[run_id]

    def _deliver(self, message: bytes) -> None:
        run_id, _, frames = message.partition(b"\n")
        run_id = run_id.decode()
        if (queue := self._direct.get(run_id)) is not None:
            queue.offer(frames)
            return
        now = time.monotonic()
        while self._unclaimed:  # the oldest first: drop what no stream came for
            oldest = next(iter(self._unclaimed))
            if now - self._unclaimed[oldest][0] < UNCLAIMED_SECONDS:
                break
            del self._unclaimed[oldest]
        self._unclaimed.setdefault(run_id, (now, []))[1].append(frames)

    async def _read(self) -> None:
        """Connect, subscribe (the inbox and every channel a stream listens on) and dispatch what arrives, for the
        process's life. After a gap (the connection lost, and made again) every stream is told to reread the buffer
        for what it may have missed, once Redis has confirmed the subscriptions again."""
        delay, gap = 0.1, False
        while True:
            writer = None
            try:
                reader, writer = await pubsub.connect(self._url, CONNECT_TIMEOUT, name=self.name)
                writer.write(resp.command("SUBSCRIBE", self.inbox, *self._queues))
                self._writer = writer
                self._tried.set()
                async for replies in pubsub.replies(reader):
                    if gap:
                        log.info("stream hub has Redis again")
                        self._resync()
                    delay, gap = 0.1, False
                    for reply in replies:
                        self._dispatch(reply)
            except (redis.RedisError, OSError, TimeoutError, hiredis.ProtocolError) as error:
                if not gap:
                    log.warning("stream hub lost Redis: %s; reconnecting", error)
                    inbox_lost()  # submits stop naming it until it is confirmed again
                gap = True
            except Exception:  # not an outage: a fault of ours must not end the process's streams for good
                log.exception("stream hub: dispatching failed; reconnecting")
                inbox_lost()
                gap = True
            finally:
                self._writer = None
                if writer is not None:
                    writer.close()
            self._tried.set()
            await asyncio.sleep(delay)
            delay = min(2 * delay, 2.0)

    def _resync(self) -> None:
        for queue in (*(q for listeners in self._queues.values() for q in listeners), *self._direct.values()):
            queue.offer(RESYNC)

    def _dispatch(self, reply) -> None:
        if isinstance(reply, Exception):  # a subscription refused (an ACL)
            log.warning("stream hub: Redis refused a subscription: %s", reply)
            return
        kind, channel = reply[0], reply[1]
        if kind == b"message":
            if channel == self._inbox_channel:
                self._deliver(reply[2])
                return
            for queue in self._queues.get(channel.decode(), ()):
                queue.offer(reply[2])
        elif kind == b"subscribe":
            if channel == self._inbox_channel:
                _Inbox.ready = self.inbox
            elif (confirmed := self._confirmed.get(channel.decode())) is not None:
                confirmed.set()

    def unclaimed(self) -> set[str]:
        """The runs whose events reached the inbox before any stream of this process asked for them."""
        return set(self._unclaimed)

    def reading(self) -> set[str]:
        """The runs a stream of this process reads from the inbox now."""
        return set(self._direct)

    async def buffered(self, run_id, after: int) -> Buffered | None:
        """The buffered events above `after`, how many the buffer holds and its lowest index; None when there is
        no buffer."""
        key = publish.buffer_key(run_id)
        pipeline = self.redis.pipeline(transaction=False)
        pipeline.zrangebyscore(key, f"({after}", "+inf")
        pipeline.zcard(key)
        pipeline.zrange(key, 0, 0, withscores=True)
        events, total, lowest = await pipeline.execute()
        return Buffered(events, total, int(lowest[0][1])) if total and lowest else None


_hubs: dict[asyncio.AbstractEventLoop, Hub] = {}


class _Inbox:
    ready: str | None = None  # the inbox of this process's hub, once Redis has confirmed its subscription


def ready_inbox() -> str | None:
    """The inbox a submit may name on its run so its stream reads the run's events from there; None until the
    process's hub listens on it (its first stream starts the hub)."""
    return _Inbox.ready


def inbox_lost() -> None:
    """Stop offering this process's inbox to submits, until its hub has it confirmed again."""
    _Inbox.ready = None


def hub() -> Hub:
    """This event loop's hub (one per web process in practice)."""
    loop = asyncio.get_running_loop()
    if loop not in _hubs:
        _hubs[loop] = Hub(current().services.redis_url)
    return _hubs[loop]
