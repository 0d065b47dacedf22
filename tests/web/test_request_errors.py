"""An unhandled exception in production: logged with its traceback and the request's id, answered with that id
(JSON on the API, a page elsewhere), never Django's HTML error page for an API client."""

import logging

import pytest
from django.urls import include, path

from adaptis_web.urls import urlpatterns as real_urlpatterns


class Boom(RuntimeError):
    pass


def _explode(request):
    raise Boom("the planner fell over")


# This module is the URLconf of these tests: the real routes plus two that fail.
urlpatterns = [path("api/explode/", _explode), path("explode/", _explode), path("", include(real_urlpatterns))]
handler500 = "adaptis_web.request_errors.server_error"


@pytest.fixture
def failing_site(settings, client):
    settings.ROOT_URLCONF = __name__
    settings.DEBUG = False
    client.raise_request_exception = False
    return client


def _logged_failure(caplog) -> logging.LogRecord:
    records = [record for record in caplog.records if record.name == "django.request" and record.exc_info]
    assert len(records) == 1, [record.getMessage() for record in caplog.records]
    return records[0]


def test_api_failure_answers_json_with_the_request_id_and_logs_the_traceback(failing_site, caplog):
    response = failing_site.get("/api/explode/", HTTP_ACCEPT="application/json")
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    body = response.json()
    request_id = response["X-Request-ID"]
    assert body["request_id"] == request_id and len(request_id) == 32
    assert body["errors"][0]["reason"].startswith("internal server error")
    record = _logged_failure(caplog)
    assert record.exc_info[0] is Boom and record.request_id == request_id
    formatted = logging.getLogger("django.request").handlers[0].format(record)
    assert f"[request {request_id}]" in formatted and "Traceback" in formatted and "the planner fell over" in formatted


def test_page_failure_shows_the_request_id_and_keeps_a_sane_client_id(failing_site, caplog):
    response = failing_site.get("/explode/", HTTP_X_REQUEST_ID="lb-7f3a.42")
    assert response.status_code == 500 and response["X-Request-ID"] == "lb-7f3a.42"
    assert response["Content-Type"].startswith("text/html") and b"lb-7f3a.42" in response.content
    assert _logged_failure(caplog).request_id == "lb-7f3a.42"


def test_an_unusable_client_id_is_replaced_and_every_response_carries_one(failing_site):
    response = failing_site.get("/healthz", HTTP_X_REQUEST_ID="x" * 500)
    assert response.status_code in (200, 503) and len(response["X-Request-ID"]) == 32
