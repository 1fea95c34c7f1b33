"""A web process's pub/sub connection to Redis, read raw: each read of the socket is parsed at once (hiredis) and
all the replies it held handed on together, with no task step and no parser layers per message.

redis-py's `PubSub.get_message` took one task step and a dozen calls through its retry, parser and push-message
layers for every message; a streamed run gets about two (docs/benchmarks.md has what that cost the web).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import hiredis
import redis
from redis.asyncio.connection import SSLConnection, parse_url

from agentos_project.core import resp

READ_BYTES = 65536


async def connect(
    url: str, timeout: float, name: str | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the Redis of `url` (redis://, rediss:// with redis-py's TLS options, unix://), logged in
    when the URL names a password and called `name` (CLIENT LIST shows it); RedisError, OSError or TimeoutError
    (after `timeout`) when it cannot be had."""
    options = parse_url(url)
    greeting = []
    if options.get("password"):
        greeting.append(("AUTH", *filter(None, (options.get("username"), options["password"]))))
    if name:
        greeting.append(("CLIENT", "SETNAME", name))
    async with asyncio.timeout(timeout):
        if "path" in options:
            reader, writer = await asyncio.open_unix_connection(options["path"])
        else:
            host, port = options.get("host", "localhost"), options.get("port", 6379)
            reader, writer = await asyncio.open_connection(host, port, ssl=_tls(options), limit=READ_BYTES)
        try:
            if greeting:
                writer.write(b"".join(resp.command(*words) for words in greeting))
                await _answered(reader, greeting)
        except BaseException:
            writer.close()
            raise
    return reader, writer


async def _answered(reader: asyncio.StreamReader, commands: list[tuple[str, ...]]) -> None:
    """Read the answers to `commands`; a refusal is raised as a ConnectionError naming the command (not its
    arguments: a password)."""
    answers = []
    async with contextlib.aclosing(replies(reader)) as batches:
        async for batch in batches:
            answers += batch
            if len(answers) >= len(commands):
                break
    for words, answer in zip(commands, answers, strict=False):
        if isinstance(answer, Exception):
            raise redis.ConnectionError(f"Redis refused {words[0]}: {answer}")


def _tls(options: dict):
    """The TLS context of a rediss:// URL, made with redis-py's defaults and options; None for redis://."""
    if options.get("connection_class") is not SSLConnection:
        return None
    settings = {name: value for name, value in options.items() if name != "connection_class"}
    return SSLConnection(**settings).ssl_context.get()


async def replies(reader: asyncio.StreamReader) -> AsyncIterator[list]:
    """The replies on the connection, as many as each read brought (a reply that spans reads comes with the read that
    completes it); ends with ConnectionError when Redis closes the connection."""
    parser = hiredis.Reader()
    while data := await reader.read(READ_BYTES):
        parser.feed(data)
        batch = []
        while (reply := parser.gets()) is not False:
            batch.append(reply)
        if batch:
            yield batch
    raise redis.ConnectionError("Redis closed the pub/sub connection")
