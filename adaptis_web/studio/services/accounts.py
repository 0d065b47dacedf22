"""User accounts: API tokens."""

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from rest_framework.authtoken.models import Token


@transaction.atomic
def token_rotate(*, user: AbstractBaseUser) -> Token:
    """A new API token for ``user``; the previous one stops working."""
    Token.objects.filter(user=user).delete()
    return Token.objects.create(user=user)
