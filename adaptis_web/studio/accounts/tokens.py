"""User accounts: named API tokens (django-rest-knox stores only their digest), revoked by deleting them."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser

from adaptis_web.studio.common.refusals import Conflict
from adaptis_web.studio.models import ApiToken
from planner.errors import SpecError

MAX_TOKEN_NAME = 100


def token_create(*, user: AbstractBaseUser, name: str, expires_in_days: int) -> tuple[ApiToken, str]:
    """A new token named ``name`` that expires in ``expires_in_days``; returns the row and the token itself,
    which is shown once and never stored."""
    name = name.strip()
    if not name:
        raise SpecError("name", "is required: name the token after what will use it")
    if len(name) > MAX_TOKEN_NAME:
        raise SpecError("name", f"is {len(name)} characters; the limit is {MAX_TOKEN_NAME}")
    if ApiToken.objects.filter(user=user, name=name).exists():
        raise Conflict("name", f"you already have a token named {name!r}")
    if not 1 <= expires_in_days <= settings.API_TOKEN_MAX_DAYS:
        raise SpecError("expires_in_days", f"must be between 1 and {settings.API_TOKEN_MAX_DAYS}; "
                                           f"got {expires_in_days}")
    return ApiToken.objects.create(user=user, expiry=timedelta(days=expires_in_days), name=name)


def token_revoke(*, token: ApiToken) -> None:
    token.delete()
