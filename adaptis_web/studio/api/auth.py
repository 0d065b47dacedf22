"""API token authentication: django-rest-knox's, which also stamps the token's last use and throttles guessing."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication
from rest_framework import exceptions
from rest_framework.authentication import get_authorization_header
from rest_framework.throttling import SimpleRateThrottle

LAST_USED_RESOLUTION = timedelta(minutes=1)  # a busy client would otherwise write the token row on every call


class FailedTokenThrottle(SimpleRateThrottle):
    """Counts only failed token attempts, per client address: a valid token is never slowed down, while
    guessing one stops at the ``token_failures`` rate with 429."""

    scope = "token_failures"

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def throttle_success(self) -> bool:
        return True  # a request is counted when its token fails (record_failure), not when it is let through

    def record_failure(self) -> None:
        self.history.insert(0, self.now)
        self.cache.set(self.key, self.history, self.duration)


class NamedTokenAuthentication(TokenAuthentication):
    def authenticate(self, request):
        if not get_authorization_header(request):
            return None  # a browser's session request: no token, nothing to count (and no cache read)
        guard = FailedTokenThrottle()
        if not guard.allow_request(request, None):
            raise exceptions.Throttled(guard.wait(), detail="too many failed token attempts from this address")
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            guard.record_failure()
            raise

    def validate_user(self, auth_token):
        user, token = super().validate_user(auth_token)
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            type(token).objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
        return user, token


class NamedTokenScheme(KnoxTokenScheme):
    """Describes the ``Authorization: Token <token>`` header in the OpenAPI schema (drf-spectacular)."""

    target_class = "adaptis_web.studio.api.auth.NamedTokenAuthentication"
