"""The JWKS file (AGENTOS_JWT_JWKS_FILE) read again as it changes, so a rotated key is taken without a restart
(issue 41): a file half-written or gone keeps the keys read last, one never read well gives none (401, not 500), and
a rewrite stat cannot see is seen by its content, while a file that did not change is not read again."""

from __future__ import annotations

import logging
import os
import time

import pytest

from runs.models import Run
from tests.agentos_project.core.identity.conftest import jwks_of, rsa_key, submitted_by, token
from tests.support.conf import with_conf

pytestmark = pytest.mark.django_db


def test_a_rotated_jwks_file_is_read_again_without_a_restart(api, tmp_path):
    old, new = rsa_key(), rsa_key()
    path = tmp_path / "jwks.json"
    path.write_text(jwks_of(old=old))
    with with_conf("security", jwt_jwks_file=str(path), jwt_algorithm="RS256"):
        before = submitted_by(api, token(old, "RS256", headers={"kid": "old"}))
        path.write_text(jwks_of(new=new))
        os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000_000))
        rotated = submitted_by(api, token(new, "RS256", headers={"kid": "new"}))
        retired = submitted_by(api, token(old, "RS256", headers={"kid": "old"}))

    assert (before.status_code, rotated.status_code) == (202, 202)
    assert (retired.status_code, retired.json()) == (
        401,
        {"detail": 'Invalid token: Unable to find a signing key that matches: "old"'},
    )


def touched(path, text: str) -> None:
    """Write `text` to `path`, its modification time a second after the one it had: a later write."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def auth_lines(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "agentos.auth"]


def test_a_jwks_file_half_written_or_gone_keeps_the_keys_read_last_and_says_so_once(client, tmp_path, caplog):
    key = rsa_key()
    path = tmp_path / "jwks.json"
    path.write_text(jwks_of(k1=key))
    signed = token(key, "RS256", headers={"kid": "k1"})
    with with_conf("security", jwt_jwks_file=str(path), jwt_algorithm="RS256"), caplog.at_level(logging.INFO):
        first = submitted_by(client, signed).status_code
        touched(path, '{"keys": [{"kty"')
        half_written = [submitted_by(client, signed).status_code for _ in range(2)]
        path.unlink()
        gone = [submitted_by(client, signed).status_code for _ in range(2)]

    assert (first, half_written, gone) == (202, [202, 202], [202, 202])
    assert auth_lines(caplog) == [
        f"JWKS file {path} read: 1 keys",
        f"JWKS file {path} not used (no JWKS document: Expecting ':' delimiter: line 1 column 17 (char 16)); the "
        "keys read last stay in use",
        f"JWKS file {path} not used (No such file or directory); the keys read last stay in use",
    ]


@pytest.mark.parametrize(
    "content",
    [None, '{"keys": [{"kty"', "[]", '{"keys": 5}', '{"keys": [5, "x", {"kty": "RSA"}]}', b"\xff\xfe"],
    ids=["missing", "half-written", "a list", "keys not a list", "no usable key", "not UTF-8"],
)
def test_a_jwks_file_never_read_well_gives_no_keys_so_a_token_is_refused_not_a_crash(client, tmp_path, content):
    path = tmp_path / "jwks.json"
    if content is not None:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with with_conf("security", jwt_jwks_file=str(path), jwt_algorithm="RS256"):
        response = submitted_by(client, token(rsa_key(), "RS256", headers={"kid": "k1"}))

    assert (response.status_code, response.json()) == (
        401,
        {"detail": "Invalid token: No verification keys configured"},
    )
    assert not Run.objects.exists()


def test_a_rewrite_of_the_same_size_in_the_same_clock_tick_is_seen(client, tmp_path):
    old, new = rsa_key(), rsa_key()
    path = tmp_path / "jwks.json"
    path.write_text(jwks_of(k1=old))
    with with_conf("security", jwt_jwks_file=str(path), jwt_algorithm="RS256"):
        before = submitted_by(client, token(old, "RS256", headers={"kid": "k1"}))
        stamp = path.stat()
        path.write_text(jwks_of(k1=new))
        os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
        assert (path.stat().st_ino, path.stat().st_size, path.stat().st_mtime_ns) == (
            stamp.st_ino,
            stamp.st_size,
            stamp.st_mtime_ns,
        ), "nothing stat shows tells the two writes apart"
        rotated = submitted_by(client, token(new, "RS256", headers={"kid": "k1"}))
        retired = submitted_by(client, token(old, "RS256", headers={"kid": "k1"}))

    assert (before.status_code, rotated.status_code) == (202, 202)
    assert (retired.status_code, retired.json()) == (401, {"detail": "Invalid token: Signature verification failed"})


def test_a_file_unchanged_since_a_read_well_after_its_last_write_is_not_read_again(client, tmp_path, caplog):
    key = rsa_key()
    path = tmp_path / "jwks.json"
    path.write_text(jwks_of(k1=key))
    an_hour_ago = time.time_ns() - 3600 * 1_000_000_000
    os.utime(path, ns=(an_hour_ago, an_hour_ago))
    signed = token(key, "RS256", headers={"kid": "k1"})
    with with_conf("security", jwt_jwks_file=str(path), jwt_algorithm="RS256"), caplog.at_level(logging.INFO):
        first = submitted_by(client, signed)
        path.write_text("x" * path.stat().st_size)  # were it read again, this would be logged as no JWKS document
        os.utime(path, ns=(an_hour_ago, an_hour_ago))
        second = submitted_by(client, signed)

    assert (first.status_code, second.status_code) == (202, 202)
    assert auth_lines(caplog) == [f"JWKS file {path} read: 1 keys"]


def test_a_jwks_file_back_as_it_was_is_in_use_again_and_its_next_failure_is_logged(client, tmp_path, caplog):
    key = rsa_key()
    path = tmp_path / "jwks.json"
    path.write_text(jwks_of(k1=key))
    signed = token(key, "RS256", headers={"kid": "k1"})
    with with_conf("security", jwt_jwks_file=str(path), jwt_algorithm="RS256"), caplog.at_level(logging.INFO):
        answers = [submitted_by(client, signed).status_code]
        content = path.read_text()
        path.unlink()
        answers.append(submitted_by(client, signed).status_code)
        path.write_text(content)
        answers.append(submitted_by(client, signed).status_code)
        path.unlink()
        answers.append(submitted_by(client, signed).status_code)

    assert answers == [202, 202, 202, 202]
    gone = f"JWKS file {path} not used (No such file or directory); the keys read last stay in use"
    assert auth_lines(caplog) == [f"JWKS file {path} read: 1 keys", gone, gone]
