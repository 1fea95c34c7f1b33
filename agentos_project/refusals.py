"""The answers a web process gives to a request it refuses before Django sees it (`agentos_project.headerlimit`,
`.bodylimit`, `.httpserver`): a `{"detail": ...}` body as every error of the API has, the texts of those details, and
`Connection: close`, since the rest of the request is left unread."""

from __future__ import annotations

import json
from http import HTTPStatus

from .core.units import bytes_text, seconds_text

HEADERS_TOO_LARGE = 431  # Request Header Fields Too Large (RFC 6585)
TOO_SLOW = 408  # Request Timeout


def headers_too_large(limit: int) -> str:
    return f"Request headers exceed the {bytes_text(limit)} limit"


def too_many_headers(limit: int) -> str:
    return f"Request has more than {limit} header fields"


def authorization_too_large(limit: int) -> str:
    return f"Authorization header exceeds the {bytes_text(limit)} limit"


def head_too_slow(seconds: float) -> str:
    return f"Request headers not received within {seconds_text(seconds)} s"


def body_too_slow(seconds: float) -> str:
    return f"Request body not received within {seconds_text(seconds)} s"


async def send_refusal(send, status: int, detail: str) -> None:
    """Answer `status` with `detail` through an ASGI `send`."""
    body = _body(detail)
    await send({"type": "http.response.start", "status": status, "headers": _headers(body)})
    await send({"type": "http.response.body", "body": body})


def refusal_bytes(status: int, detail: str, server_headers: list[tuple[bytes, bytes]]) -> bytes:
    """The whole HTTP/1.1 answer `status` with `detail`, as a server writes it on the connection, with its own
    headers (`server`, `date`) first."""
    body = _body(detail)
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}".encode()]
    lines += [name + b": " + value for name, value in [*server_headers, *_headers(body)]]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def _body(detail: str) -> bytes:
    return json.dumps({"detail": detail}).encode()


def _headers(body: bytes) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
