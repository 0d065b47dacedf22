"""``GET /api/``: the API's own index, so a user who types the API's address finds every endpoint from there.

It is built from the API's URL configuration, not written by hand, so it cannot miss an endpoint or name one that
is gone: each entry gives the endpoint's name, its path as a template (``/api/jobs/{job_id}/``; a path with no
parameter is a full link), and the methods its view answers. Anyone may read it, as anyone may read the schema
it points to; every endpoint it lists checks who is asking.
"""

from __future__ import annotations

import re

from django.urls import URLPattern, get_resolver, reverse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

_PARAMETER = re.compile(r"<(?:[^:>]+:)?([^>]+)>")   # Django's <converter:name>, as OpenAPI writes it: {name}


def _methods(view_class) -> list[str]:
    return [method.upper() for method in view_class.http_method_names
            if method not in ("options", "head") and hasattr(view_class, method)]


def api_endpoints(request) -> list[dict]:
    """Every endpoint under ``/api/``, in the URL configuration's order (read from the resolver, as the router
    matches them: the URL module imports this one)."""
    _, api_urls = get_resolver().namespace_dict["api"]
    prefix = reverse("api:root")
    endpoints = []
    for pattern in api_urls.url_patterns:
        if not isinstance(pattern, URLPattern):
            continue
        path = prefix + _PARAMETER.sub(r"{\1}", str(pattern.pattern))
        entry = {"name": pattern.name, "path": path, "methods": _methods(pattern.callback.view_class)}
        if "{" not in path:
            entry["url"] = request.build_absolute_uri(path)
        endpoints.append(entry)
    return endpoints


class ApiRootApi(APIView):
    permission_classes = [AllowAny]

    @extend_schema(summary="The API's index: every endpoint, the schema and its documentation page",
                   responses=inline_serializer("ApiRoot", {
                       "schema": serializers.URLField(), "docs": serializers.URLField(),
                       "endpoints": serializers.ListField(child=inline_serializer("ApiEndpoint", {
                           "name": serializers.CharField(), "path": serializers.CharField(),
                           "methods": serializers.ListField(child=serializers.CharField()),
                           "url": serializers.URLField(required=False,
                                                       help_text="only for a path without parameters")}))}))
    def get(self, request):
        return Response({"schema": request.build_absolute_uri(reverse("api-schema")),
                         "docs": request.build_absolute_uri(reverse("api-docs")),
                         "endpoints": api_endpoints(request)})
