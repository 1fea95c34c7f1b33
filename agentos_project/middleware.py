"""Refuse an oversized body before anything reads it (CONTRACT 3.1: over 1 MiB is 413)."""

from django.conf import settings
from django.http import JsonResponse

from .exceptions import BodyTooLarge


class BodySizeLimitMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        length = request.META.get("CONTENT_LENGTH")
        if length and length.isdigit() and int(length) > settings.MAX_BODY_BYTES:
            return JsonResponse({"detail": BodyTooLarge.default_detail}, status=413)
        return self.get_response(request)
