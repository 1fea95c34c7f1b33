"""A child process's output passed through its parent, read on the way (the supervisor of `serve`).

Standard library only: the supervisor holds no Django.
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import threading
import time
from typing import BinaryIO

# Once its child is ready, a pump lets what the child writes gather in the pipe this long before it copies it: a
# busy child writes a line per ticket change, and a read, a write and a wake-up per line cost the supervisor more
# than the lines are worth (docs/benchmarks.md). A line waits at most this long; a child that fills the pipe's
# 64 KB meanwhile waits.
GATHER_SECONDS = 0.05


class ChildOutput:
    """The stdout and stderr of one child process, each copied to a stream of ours as it comes (on a thread of its
    own, so a child never waits on another). Until the child is ready, their lines are read too: watched for
    `ready_line` and kept in `tail`; after that, they are only copied."""

    def __init__(
        self,
        process: subprocess.Popen,
        streams: tuple[BinaryIO, BinaryIO],
        *,
        locks: tuple[threading.Lock, threading.Lock],
        ready_line: str | None,
        tail: collections.deque,
    ):
        self.ready = threading.Event()
        if ready_line is None:
            self.ready.set()
        self._ready_line, self._tail = ready_line, tail
        self._pumps = [
            threading.Thread(target=self._pump, args=(pipe, stream, lock), daemon=True)
            for pipe, stream, lock in zip((process.stdout, process.stderr), streams, locks, strict=True)
        ]
        for pump in self._pumps:
            pump.start()

    def join(self, timeout: float) -> None:
        """Wait (up to `timeout` seconds) until everything the process wrote has been copied and read."""
        deadline = time.monotonic() + timeout
        for pump in self._pumps:
            pump.join(max(0.0, deadline - time.monotonic()))

    def _pump(self, pipe: BinaryIO, stream: BinaryIO, lock: threading.Lock) -> None:
        partial = b""
        with pipe:
            while chunk := os.read(pipe.fileno(), 65536):
                with lock, contextlib.suppress(OSError, ValueError):  # ours closed: keep reading, drop it
                    stream.write(chunk)
                    stream.flush()
                if self.ready.is_set():
                    time.sleep(GATHER_SECONDS)
                    continue
                *lines, partial = (partial + chunk).split(b"\n")
                if len(partial) > 65536:  # a line that long is kept in pieces
                    lines, partial = [*lines, partial], b""
                for line in lines:
                    self._watch(line)
        if partial and not self.ready.is_set():
            self._watch(partial)

    def _watch(self, line: bytes) -> None:
        text = line.decode(errors="replace").rstrip("\r")
        self._tail.append(text)
        if self._ready_line is not None and self._ready_line in text:
            self.ready.set()
