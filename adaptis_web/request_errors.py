"""Every request carries an id; an unhandled exception is logged with its traceback and that id, and the client
gets the id back: JSON for the API (an API client never parses an HTML page), a plain page for a browser.

The id is the client's own ``X-Request-ID`` when it sends a sane one (a proxy's id ties the two logs together),
otherwise a new UUID; the response always carries it in ``X-Request-ID``.
"""

from __future__ import annotations

import contextvars
import logging
import re
import uuid

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse

REQUEST_ID_HEADER = "X-Request-ID"
_SANE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_current_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


def current_request_id() -> str:
    return _current_request_id.get()


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        offered = request.headers.get(REQUEST_ID_HEADER, "")
        request.id = offered if _SANE_ID.fullmatch(offered) else uuid.uuid4().hex
        token = _current_request_id.set(request.id)
        try:
            response = self.get_response(request)
        finally:
            _current_request_id.reset(token)
        response[REQUEST_ID_HEADER] = request.id
        return response


class RequestIdFilter(logging.Filter):
    """Gives every log record ``request_id`` (``-`` outside a request), for the formatter."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id()
        return True


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: Django has already logged the exception (logger ``django.request``, with traceback)."""
    request_id = getattr(request, "id", None) or current_request_id()
    reason = "internal server error: the failure is logged under this request id"
    if request.path.startswith("/api/"):
        response = JsonResponse({"errors": [{"field": "", "reason": reason}], "request_id": request_id}, status=500)
    else:
        response = TemplateResponse(request, "500.html", {"request_id": request_id}, status=500)
        response.render()
    response[REQUEST_ID_HEADER] = request_id
    return response


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler400``: what Django itself refuses before a view runs (a body past DATA_UPLOAD_MAX_MEMORY_SIZE, too
    many fields, a disallowed host): the API's error shape on /api/, a plain page elsewhere."""
    field, reason = "", str(exception) or "bad request"
    if isinstance(exception, RequestDataTooBig):
        field, reason = "body", f"the body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE // (1 << 20)} MiB"
    elif isinstance(exception, TooManyFieldsSent):
        field = "body"
    request_id = getattr(request, "id", None) or current_request_id()
    if request.path.startswith("/api/"):
        response = JsonResponse({"errors": [{"field": field, "reason": reason}], "request_id": request_id},
                                status=400)
    else:
        response = HttpResponse(f"Bad request: {reason}", status=400, content_type="text/plain; charset=utf-8")
    response[REQUEST_ID_HEADER] = request_id
    return response


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler404``: a URL that matches nothing (or an id past the largest) is DRF's ``{"detail"}`` on /api/."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)
