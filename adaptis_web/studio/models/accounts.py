"""Teams, their members and roles, invitations and API tokens: who may see and change what (accounts.roles)."""

from django.conf import settings
from django.db import models
from knox.models import AbstractAuthToken


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    run_environment = models.CharField(
        max_length=500, blank=True, default="",
        help_text="the shell line that readies the executor on every node of the team's cluster runs (a virtual "
                  "environment, a module load; or image:NAME, a container image for Kubernetes); empty: the default")
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="teams")

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        """From most to least trusted; accounts.roles decides what each may do."""

        OWNER = "owner", "Owner"
        ADMIN = "admin", "Admin"
        MEMBER = "member", "Member"
        VIEWER = "viewer", "Viewer"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "user"], name="membership_unique_team_user"),
            models.UniqueConstraint(fields=["team"], condition=models.Q(role="owner"), name="membership_one_owner"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Invitation(models.Model):
    """A single-use link that makes whoever opens it (logged in) a member of ``team`` with ``role``.

    Only the SHA-256 of the link's key is stored: the link is shown once, to the admin who created it.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    role = models.CharField(max_length=10, choices=Membership.Role.choices, default=Membership.Role.MEMBER)
    key_digest = models.CharField(max_length=64, unique=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    accepted_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"invitation to {self.team} as {self.role}"


class ApiToken(AbstractAuthToken):
    """An API token as django-rest-knox keeps it (a SHA-512 digest, never the token; an expiry), with the name
    its user gave it and when it last authenticated a request (stamped at most once a minute)."""

    name = models.CharField(max_length=100)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="apitoken_unique_user_name")]

    def __str__(self) -> str:
        return f"token {self.name!r} of {self.user}"
