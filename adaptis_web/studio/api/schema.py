"""The OpenAPI document tells the truth about errors: every operation lists each error status it can answer with,
and its body (drf-spectacular's postprocessing hook ``document_errors``).

- 400 ``Errors``: an operation that takes a body, query parameters or an object in its path (bad input, a body
  that does not parse, an object whose state refuses the operation);
- 401 ``Detail``: every operation (no or bad credentials);
- 403 ``Errors`` or ``Detail``: every operation (a role's refusal names ``role``; a CSRF failure of a session);
- 404 ``Detail`` or ``Errors``: an operation with a path parameter (another team's object, no such object), a
  cursor, or a body naming something (a member, a user);
- 409 ``Errors``: an operation that changes state (a name taken, already archived, still running);
- 415 ``Errors``: an operation that takes a body, sent in a media type it does not read;
- 429 ``Errors``: every operation (guessing tokens is throttled wherever a token is sent; creating work is
  throttled per user);
- 500 ``Errors``: every operation, with the request id the failure is logged under.

A job's ``result`` is empty (``{}``) for a baseline job and until a job succeeds: ``JobResult`` says so beside the
search and hybrid summaries.

And a history filter given empty (``?status=``, as the History page's form sends an unused one) filters nothing: its
schema says so. Two more hooks: a text that may be blank (``document_blank_texts``), and the rules between a
request's fields (``document_request_rules``).
"""

from __future__ import annotations

from django.utils import translation
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.views import SpectacularAPIView

from adaptis_web.studio.api.fields import KnownFieldsMixin
from adaptis_web.studio.planning.serializers import JOB_CREATE_RULES

ERROR_ITEM = {"type": "object", "properties": {"field": {"type": "string"}, "reason": {"type": "string"}},
              "required": ["field", "reason"]}
SCHEMAS = {
    "Errors": {"type": "object", "required": ["errors"], "properties": {
        "errors": {"type": "array", "items": ERROR_ITEM, "minItems": 1},
        "request_id": {"type": "string", "description": "500 only: the id the failure is logged under"},
        "retry_after_s": {"type": "integer", "nullable": True,
                          "description": "429 only: seconds until a retry may pass"},
    }},
    "Detail": {"type": "object", "required": ["detail"], "properties": {"detail": {"type": "string"}}},
}


def _response(description: str, *schemas: str) -> dict:
    refs = [{"$ref": f"#/components/schemas/{name}"} for name in schemas]
    schema = refs[0] if len(refs) == 1 else {"oneOf": refs}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


PAGING_PARAMETERS = {"cursor", "page_size", "limit", "offset", "after"}


def _empty_means_unfiltered(parameters: list[dict]) -> None:
    for parameter in parameters:
        if parameter.get("in") == "query" and parameter["name"] not in PAGING_PARAMETERS and "schema" in parameter:
            parameter["schema"] = {"anyOf": [parameter["schema"], {"type": "string", "maxLength": 0}]}


EMPTY_RESULT = {"type": "object", "maxProperties": 0, "description": "no result: a baseline job, or not succeeded"}


REQUEST_RULES = {"JobCreateInputRequest": JOB_CREATE_RULES}
BLANK = {"type": "string", "maxLength": 0}


def _blank_any_of(node) -> None:
    if isinstance(node, dict):
        alternatives = node.get("oneOf")
        if isinstance(alternatives, list) and len(alternatives) == 2 and alternatives[1] == BLANK:
            node["anyOf"] = node.pop("oneOf")
        for value in node.values():
            _blank_any_of(value)
    elif isinstance(node, list):
        for value in node:
            _blank_any_of(value)


def document_blank_texts(result: dict, generator, request, public) -> dict:
    """A text that may be blank: drf-spectacular writes ``oneOf: [its pattern, an empty string]``, but the pattern
    matches an empty string too, and an empty string that matches both alternatives of a oneOf is invalid:
    ``anyOf`` says what the API takes."""
    _blank_any_of(result)
    return result


def document_request_rules(result: dict, generator, request, public) -> dict:
    """Rules between a request's fields that JSON Schema can state (a job's one cluster of three ways, its mode and
    what that requires), added to the request's component; and no other fields, where the serializer refuses them
    (``api.fields.KnownFieldsMixin``)."""
    components = result.get("components", {}).get("schemas", {})
    for name, rules in REQUEST_RULES.items():
        components[name].update(rules)
    for serializer in KnownFieldsMixin.__subclasses__():   # they refuse fields they do not take
        if f"{serializer.__name__}Request" in components:
            components[f"{serializer.__name__}Request"]["additionalProperties"] = False
    return result


def document_errors(result: dict, generator, request, public) -> dict:
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components.update(SCHEMAS)
    if "JobResult" in components and EMPTY_RESULT not in components["JobResult"]["oneOf"]:
        components["JobResult"]["oneOf"].append(EMPTY_RESULT)
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            parameters = operation.get("parameters", [])
            if method == "get":
                _empty_means_unfiltered(parameters)
            query = any(parameter.get("in") == "query" for parameter in parameters)
            in_path = "{" in path
            body = "requestBody" in operation
            errors = {
                "401": _response("Not authenticated: no credentials, or a token that is wrong or expired", "Detail"),
                "403": _response("Refused: the role is not enough (field 'role'), or a session's CSRF check failed",
                                 "Errors", "Detail"),
                "429": _response("Throttled: try again after Retry-After seconds", "Errors"),
                "500": _response("Internal error, logged under request_id", "Errors"),
            }
            if body or query or in_path:
                errors["400"] = _response("Bad input: each error names the field and the reason", "Errors")
            if in_path or body or any(parameter.get("name") == "cursor" for parameter in parameters):
                errors["404"] = _response("No such object in your teams (or an invalid cursor)", "Detail", "Errors")
            if method != "get" and (in_path or body):
                errors["409"] = _response("Refused by the current state: each error names the field and the reason",
                                          "Errors")
            if body:
                errors["415"] = _response("The body's media type is not one this operation reads", "Errors")
            # gunicorn answers an overlong request line itself, with its own HTML page (gunicorn.conf.py)
            errors["414"] = {"description": "URI too long: the request line exceeds the server's limit "
                                            "(gunicorn's limit_request_line, gunicorn.conf.py); the body is the "
                                            "server's HTML page",
                             "content": {"text/html": {"schema": {"type": "string"}}}}
            for status, response in errors.items():
                operation["responses"].setdefault(status, response)
    return result


class OnceSchemaGenerator(SchemaGenerator):
    """drf-spectacular's generator, each document generated once per process, API version, language and
    visibility. It describes the code, which does not change while the process runs, and generating it costs about
    a second of CPU, which every client's fetch of ``/api/schema/`` used to pay again."""

    _documents: dict[tuple, dict] = {}

    def get_schema(self, request=None, public=False):
        key = (self.api_version or getattr(request, "version", None), translation.get_language(), public)
        if key not in self._documents:
            self._documents[key] = super().get_schema(request=request, public=public)
        return self._documents[key]


class SchemaView(SpectacularAPIView):
    """``/api/schema/``: drf-spectacular's view on ``OnceSchemaGenerator``."""

    generator_class = OnceSchemaGenerator
