"""What the OpenAPI schema says of a request is what the API does with it: each case here is one the stateful
schema fuzzing found (tests/web/test_openapi_fuzz.py)."""

from __future__ import annotations

from django.urls import reverse
from rest_framework.test import APIClient

from adaptis_web.studio.models import Invitation


def _api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _refused(response, field: str) -> None:
    assert response.status_code == 400, response.content[:500]
    assert response.json()["errors"][0]["field"] == field, response.json()


def test_a_multipart_body_whose_parts_name_no_field_is_refused(people):
    """An array is no form: Django skipped the part without a name and the invitation went out with the defaults."""
    owner, url = _api(people.owner), reverse("api:team-invitations", args=[people.team.pk])
    boundary = "b0undary"
    for body in (f"--{boundary}\r\n[]--{boundary}--\r\n",
                 f"--{boundary}\r\nContent-Type: text/plain\r\n\r\nx\r\n--{boundary}--\r\n"):
        response = owner.post(url, data=body.encode(), content_type=f"multipart/form-data; boundary={boundary}")
        _refused(response, "body")
    assert not Invitation.objects.exists()
    named = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"role\"\r\n\r\nviewer\r\n"
             f"--{boundary}--\r\n")
    response = owner.post(url, data=named.encode(), content_type=f"multipart/form-data; boundary={boundary}")
    assert response.status_code == 201 and response.json()["role"] == "viewer"
    empty = owner.post(url, data=f"--{boundary}--\r\n".encode(),
                       content_type=f"multipart/form-data; boundary={boundary}")
    assert empty.status_code == 201 and empty.json()["role"] == "member"
