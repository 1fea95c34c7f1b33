"""The JWKS file (AGENTOS_JWT_JWKS_FILE) read again as it changes, so a rotated key is taken without a restart."""

from __future__ import annotations

import os

import pytest

from tests.agentos_project.conftest import jwks_of, rsa_key, submitted_by, token
from tests.conftest import with_conf

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
    assert (retired.status_code, retired.json()) == (401, {"detail": "Invalid token: Signature verification failed"})
