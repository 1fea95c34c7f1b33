"""The keys of the JWKS file AGENTOS_JWT_JWKS_FILE, read again when the file changes, so a rotated key is taken
without a restart.

A file that cannot be read or is no JWKS document (gone, half-written, not JSON) changes nothing: the keys read last
stay in use, and the failure is logged once. Before a first good read there are no keys, so every token it would
verify is refused (401), never a server error.

Each use costs one `stat`: the file is read again when its inode, size or modification time moved. A write in the
same clock tick as the read before it moves none of them when the size stays, so while the file's modification
time is too close to the last read to tell, each use reads it and compares a digest; only new content is parsed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
import time
from typing import NamedTuple

import jwt

log = logging.getLogger("agentos.auth")
# How long after a write its file may be written again without its modification time moving: filesystems stamp
# it to their clock's tick (a jiffy on ext4, 2 s on FAT), and a remote one's clock may lag ours a little.
SETTLE_NS = 2_000_000_000


class Keys(NamedTuple):
    """A JWKS document's keys: those with a `kid`, by it, and those without one."""

    named: dict
    unnamed: tuple


NO_KEYS = Keys({}, ())


def parsed(content: bytes) -> Keys:
    """The keys of a JWKS document; a key PyJWT cannot verify with (an encryption key, say) is left out, as no
    token is signed with it. ValueError when `content` is no JWKS document."""
    document = json.loads(content)
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise ValueError('no "keys" list')
    named, unnamed = {}, []
    for entry in entries:
        try:
            key = jwt.PyJWK.from_dict(entry).key
        except (jwt.PyJWKError, jwt.InvalidKeyError, AttributeError, TypeError, ValueError):
            continue
        if entry.get("kid"):
            named[str(entry["kid"])] = key
        else:
            unnamed.append(key)
    return Keys(named, tuple(unnamed))


class JwksFile:
    """One JWKS file's keys as last read well (`keys()`); safe to use from several threads."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._keys = NO_KEYS
        self._seen: tuple[tuple, int] | None = None  # the file's (inode, size, mtime) and when it was read then
        self._digest: bytes | None = None  # of the content parsed last, well or not
        self._refused: str | None = None  # why that content is no JWKS document, if it is not
        self._failure: str | None = None  # the failure logged last, until a good read

    def keys(self) -> Keys:
        """The keys of the file as it is now, or as it was last read well."""
        try:
            status = os.stat(self.path)
        except OSError as error:
            self._failed(error.strerror or str(error))
            return self._keys
        stamp = (status.st_ino, status.st_size, status.st_mtime_ns)
        seen = self._seen
        if seen is None or seen[0] != stamp or status.st_mtime_ns > seen[1] - SETTLE_NS:
            with self._lock:
                self._read(stamp)
        return self._keys

    def _read(self, stamp: tuple) -> None:
        read_at = time.time_ns()
        try:
            with open(self.path, "rb") as file:
                content = file.read()
        except OSError as error:
            self._failed(error.strerror or str(error))
            return
        self._seen = (stamp, read_at)
        digest = hashlib.sha256(content).digest()
        if digest != self._digest:
            self._digest, self._refused = digest, None
            try:
                self._keys = parsed(content)
                log.info("JWKS file %s read: %d keys", self.path, len(self._keys.named) + len(self._keys.unnamed))
            except ValueError as error:  # UnicodeDecodeError and json's errors too
                self._refused = f"no JWKS document: {error}"
        if self._refused is None:
            self._failure = None
        else:
            self._failed(self._refused)

    def _failed(self, why: str) -> None:
        if why == self._failure:
            return
        self._failure = why
        kept = "the keys read last stay in use" if self._keys is not NO_KEYS else "no keys from it until it is fixed"
        log.warning("JWKS file %s not used (%s); %s", self.path, why, kept)


@functools.lru_cache(maxsize=4)
def jwks_file(path: str) -> JwksFile:
    """The one `JwksFile` of `path` in this process."""
    return JwksFile(path)
