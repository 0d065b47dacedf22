"""API tokens (django-rest-knox): several per user, named, hashed, expiring, stamped when used, revocable; failed
token attempts and token creation throttled; the login form locks a username out after repeated failures."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient
from rest_framework.throttling import SimpleRateThrottle

from adaptis_web.studio.accounts.tokens import token_create
from adaptis_web.studio.models import ApiToken


def with_token(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def session_api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


class TestTokenApi:
    def test_create_returns_the_token_once_and_stores_only_its_digest(self, people):
        response = session_api(people.member).post(reverse("api:tokens"), {"name": "ci", "expires_in_days": 7},
                                                   format="json")
        assert response.status_code == 201
        body = response.json()
        key = body["token"]
        stored = ApiToken.objects.get(user=people.member)
        assert key not in (stored.digest, stored.token_key) and len(stored.digest) == 128  # SHA-512, hex
        assert body["name"] == "ci" and body["last_used_at"] is None
        expires_in = stored.expiry - timezone.now()
        assert timedelta(days=6, hours=23) < expires_in <= timedelta(days=7)
        listed = session_api(people.member).get(reverse("api:tokens")).json()["results"]
        assert [row["name"] for row in listed] == ["ci"] and "token" not in listed[0]

    def test_several_named_tokens_each_work_and_record_their_last_use(self, people, planned):
        _, laptop = token_create(user=people.member, name="laptop", expires_in_days=30)
        _, nightly = token_create(user=people.member, name="nightly", expires_in_days=30)
        assert with_token(laptop).get(reverse("api:job", args=[planned.job.pk])).status_code == 200
        used = dict(ApiToken.objects.values_list("name", "last_used_at"))
        assert used["laptop"] is not None and used["nightly"] is None
        assert with_token(nightly).get(reverse("api:jobs")).status_code == 200

    def test_a_revoked_token_stops_working_at_once(self, people):
        token, key = token_create(user=people.member, name="ci", expires_in_days=30)
        assert session_api(people.member).delete(reverse("api:token", args=[token.token_key])).status_code == 204
        assert with_token(key).get(reverse("api:jobs")).status_code == 401

    def test_an_expired_token_is_refused(self, people):
        token, key = token_create(user=people.member, name="ci", expires_in_days=1)
        ApiToken.objects.filter(pk=token.pk).update(expiry=timezone.now() - timedelta(seconds=1))
        assert with_token(key).get(reverse("api:jobs")).status_code == 401

    def test_another_users_token_cannot_be_revoked(self, people):
        token, key = token_create(user=people.member, name="ci", expires_in_days=30)
        assert session_api(people.outsider).delete(reverse("api:token", args=[token.token_key])).status_code == 404
        assert with_token(key).get(reverse("api:jobs")).status_code == 200

    @pytest.mark.parametrize("data, field", [({"name": "", "expires_in_days": 7}, "name"),
                                             ({"name": "ci", "expires_in_days": 0}, "expires_in_days"),
                                             ({"name": "ci", "expires_in_days": 10_000}, "expires_in_days")])
    def test_bad_input_is_a_400_naming_the_field_and_stores_nothing(self, people, data, field):
        response = session_api(people.member).post(reverse("api:tokens"), data, format="json")
        assert response.status_code == 400 and response.json()["errors"][0]["field"] == field
        assert not ApiToken.objects.exists()

    def test_a_second_token_with_the_same_name_is_refused(self, people):
        token_create(user=people.member, name="ci", expires_in_days=7)
        response = session_api(people.member).post(reverse("api:tokens"), {"name": "ci"}, format="json")
        assert response.json() == {"errors": [{"field": "name", "reason": "you already have a token named 'ci'"}]}
        assert ApiToken.objects.count() == 1


@pytest.fixture
def rates(monkeypatch):
    """``rates(scope="N/hour")``: DRF's throttles read their rates once, at import, into a class attribute."""
    def set_rates(**overrides):
        monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {**SimpleRateThrottle.THROTTLE_RATES, **overrides})

    return set_rates


class TestThrottling:
    def test_guessing_tokens_is_throttled_while_a_valid_token_still_works_elsewhere(self, people, rates):
        rates(token_failures="3/hour")
        _, key = token_create(user=people.member, name="ci", expires_in_days=7)
        assert with_token(key).get(reverse("api:jobs")).status_code == 200  # successes are not counted
        statuses = [with_token(f"guess-{attempt}").get(reverse("api:jobs")).status_code for attempt in range(5)]
        assert statuses == [401, 401, 401, 429, 429]
        assert with_token(key).get(reverse("api:jobs"), REMOTE_ADDR="10.0.0.9").status_code == 200
        # the guesser's address is not locked out of a valid token: a client sharing it keeps working
        assert with_token(key).get(reverse("api:jobs")).status_code == 200
        assert with_token("guess-again").get(reverse("api:jobs")).status_code == 429

    def test_a_valid_token_works_while_the_cache_is_unreachable(self, people, settings):
        """Only failed attempts read the failure count (in Redis): with Redis away, token clients go on."""
        _, key = token_create(user=people.member, name="ci", expires_in_days=7)
        nothing_listens = "redis://127.0.0.1:9/0"  # the discard port: connections are refused at once
        settings.CACHES = {"default": {"BACKEND": "adaptis_web.cache.RedisCache", "LOCATION": nothing_listens}}
        assert with_token(key).get(reverse("api:jobs")).status_code == 200

    def test_creating_tokens_is_throttled(self, people, rates):
        rates(token_create="2/hour")
        client = session_api(people.member)
        statuses = [client.post(reverse("api:tokens"), {"name": f"t{n}"}, format="json").status_code for n in range(3)]
        assert statuses == [201, 201, 429] and ApiToken.objects.count() == 2

    def test_the_login_form_locks_a_username_out_after_repeated_failures(self, client, people, settings):
        settings.AXES_FAILURE_LIMIT = 3
        for _ in range(3):
            client.post(reverse("login"), {"username": "bob", "password": "wrong"})
        locked = client.post(reverse("login"), {"username": "bob", "password": "bob-pass-2026"})
        assert locked.status_code == 429, "even the right password is refused while locked out"
        other = client.post(reverse("login"), {"username": "alice", "password": "alice-pass-2026"})
        assert other.status_code == 302, "another username from the same address is not locked"


def test_the_admin_site_lists_tokens_without_their_secret(client, people, django_user_model):
    root = django_user_model.objects.create_superuser("root", password="root-pass-2026")
    token, key = token_create(user=people.member, name="ci", expires_in_days=7)
    client.force_login(root)
    assert client.get(reverse("admin:index")).status_code == 200
    page = client.get(reverse("admin:studio_apitoken_changelist"))
    assert page.status_code == 200 and "ci" in page.content.decode() and key not in page.content.decode()
