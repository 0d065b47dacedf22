"""API token authentication: django-rest-knox's, which also stamps the token's last use and throttles guessing.

knox deletes the user's other expired tokens while it authenticates: one query of all their tokens on every API
request. Here that sweep runs when the last use is stamped (at most once a minute per token); each request still
refuses, and deletes, its own token once expired."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme
from knox.auth import TokenAuthentication
from knox.signals import token_expired
from rest_framework import exceptions
from rest_framework.authentication import get_authorization_header
from rest_framework.throttling import SimpleRateThrottle

LAST_USED_RESOLUTION = timedelta(minutes=1)  # a busy client would otherwise write the token row on every call


class FailedTokenThrottle(SimpleRateThrottle):
    """Counts only failed token attempts, per client address: a valid token is never slowed down, while
    guessing one is answered 429 past the ``token_failures`` rate."""

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
        """The token is looked up first; only a failed attempt reads and counts the address's failures (in the
        cache, Redis). A request with a valid token never touches the cache: a Redis read less on every API call
        (~4 % of a request's CPU, ``benchmarks/web_profile.py``), and token clients keep working while Redis is
        away. Past the rate each failed attempt is a 429. An address past it is still let in with a valid token:
        a guess cannot be one (knox's tokens are 256 random bits), and a client sharing the address with a
        guesser is not locked out."""
        if not get_authorization_header(request):
            return None  # a browser's session request: no token, nothing to count (and no cache read)
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            guard = FailedTokenThrottle()
            if not guard.allow_request(request, None):
                raise exceptions.Throttled(guard.wait(), detail="too many failed token attempts from this address")
            guard.record_failure()
            raise

    def _cleanup_token(self, auth_token) -> bool:
        """True (and the token deleted) when ``auth_token`` has expired; knox also swept the user's other tokens
        here, on every request (``sweep_expired_tokens`` does that once a minute)."""
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            username = auth_token.user.get_username()
            auth_token.delete()
            token_expired.send(sender=type(self), username=username, source="auth_token")
            return True
        return False

    def validate_user(self, auth_token):
        user, token = super().validate_user(auth_token)
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            type(token).objects.filter(pk=token.pk).update(last_used_at=now)
            token.last_used_at = now
            sweep_expired_tokens(type(token).objects.filter(user=user), now=now, sender=type(self))
        return user, token


def sweep_expired_tokens(tokens, *, now, sender) -> None:
    """Delete the expired ones among ``tokens`` (a user's), as knox did, with its ``token_expired`` signal each."""
    for expired in tokens.filter(expiry__lt=now).select_related("user"):
        expired.delete()
        token_expired.send(sender=sender, username=expired.user.get_username(), source="other_token")


class NamedTokenScheme(KnoxTokenScheme):
    """Describes the ``Authorization: Token <token>`` header in the OpenAPI schema (drf-spectacular)."""

    target_class = "adaptis_web.studio.api.auth.NamedTokenAuthentication"
