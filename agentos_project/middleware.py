"""The project's own middleware: static files answered whole (`StaticFilesMiddleware`), and an oversized body
refused before anything reads it (`BodySizeLimitMiddleware`, CONTRACT 3.1: over 1 MiB is 413)."""

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from whitenoise.middleware import WhiteNoiseMiddleware

from .core.exceptions import BodyTooLarge


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise (the files `collectstatic` gathered in STATIC_ROOT, matched by their exact URL under STATIC_URL:
    any other path costs one dictionary lookup), each file answered as one whole response.

    WhiteNoise answers with a `FileResponse`, a synchronous iterator, which Django's ASGI handler reads into a list
    on a thread of its own anyway, warning that it must. Read here, on the request's thread, the file goes out as
    one message, and its file is closed before it does. The largest collected file is about half a megabyte.
    """

    @staticmethod
    def serve(static_file, request) -> HttpResponse:
        streamed = WhiteNoiseMiddleware.serve(static_file, request)
        try:
            whole = HttpResponse(b"".join(streamed.streaming_content), status=streamed.status_code)
        finally:
            streamed.close()
        del whole["Content-Type"]
        for header, value in streamed.items():
            whole[header] = value
        return whole


class BodySizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        length = request.META.get("CONTENT_LENGTH")
        if length and length.isdigit() and int(length) > settings.MAX_BODY_BYTES:
            return JsonResponse({"detail": BodyTooLarge.default_detail}, status=413)
        return self.get_response(request)
