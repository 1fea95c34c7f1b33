"""Static files (the Django admin's): answered whole by the web's middleware, collected by `serve` at start, which
starts even where it cannot collect them. Under a real `serve` and in a browser: tests/e2e/test_admin_page.py."""

from __future__ import annotations

import io
import warnings

from django.http import HttpResponse
from django.test import RequestFactory, override_settings

from agentos_project.management.commands import serve
from agentos_project.middleware import StaticFilesMiddleware

CSS = b"#header { background: #417690; }\n"


def test_a_static_file_is_answered_whole_and_any_other_path_goes_on(tmp_path):
    (tmp_path / "admin").mkdir()
    (tmp_path / "admin" / "site.css").write_bytes(CSS)
    onward = HttpResponse(b"the view")
    with override_settings(STATIC_ROOT=tmp_path, DEBUG=False):
        middleware = StaticFilesMiddleware(lambda request: onward)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Django's ASGI handler warns of a streamed file; this one is whole
        found = middleware(RequestFactory().get("/static/admin/site.css"))
    other = middleware(RequestFactory().post("/agents/stub-agent/runs"))

    assert not found.streaming
    assert (found.status_code, found.content) == (200, CSS)
    assert found["Content-Type"] == 'text/css; charset="utf-8"'
    assert found["Content-Length"] == str(len(CSS))
    assert found["Cache-Control"] == "max-age=60, public"
    assert other is onward


def test_serve_starts_where_it_cannot_collect_the_static_files(monkeypatch, settings):
    def refused(name, **options):
        raise PermissionError(13, "Permission denied", f"{settings.STATIC_ROOT}/admin/css/base.css.gz")

    monkeypatch.setattr(serve, "call_command", refused)
    said = io.StringIO()

    serve.Command(stderr=said).collect_static()

    assert said.getvalue() == (
        f"agentos: static files not collected into {settings.STATIC_ROOT} ([Errno 13] Permission denied:"
        f" '{settings.STATIC_ROOT}/admin/css/base.css.gz'); serving what is there\n"
    )
