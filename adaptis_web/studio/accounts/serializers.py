"""API input and output shapes of teams, members, invitations and tokens."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from rest_framework import serializers

from adaptis_web.studio.accounts.teams import GRANTABLE_ROLES, MAX_RUN_ENVIRONMENT, NOT_ONE_LINE
from adaptis_web.studio.api.fields import (NOT_BLANK, WHITE_SPACE, ChoiceField, IdField, KnownFieldsMixin,
                                          StrictCharField)
from adaptis_web.studio.models import ApiToken, Invitation, Membership, Team


class TeamOutput(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["id", "name", "role"]

    def get_role(self, team: Team) -> str:
        user = self.context["request"].user
        return next(m.role for m in team.memberships.all() if m.user_id == user.pk)


class TeamCreateInput(KnownFieldsMixin, serializers.Serializer):
    name = StrictCharField(max_length=100, validators=[NOT_BLANK])


class SingleLineCharField(StrictCharField):
    """One line of text, not blank: no line break or other control character (a tab is fine) anywhere in what was
    sent, checked before the white space around it is taken away, as the schema's pattern says."""

    default_error_messages = {"not_one_line": "must be a single line (no line breaks or other control characters)"}

    def run_validation(self, data=serializers.empty):
        if isinstance(data, str) and NOT_ONE_LINE.search(data):
            self.fail("not_one_line")
        return super().run_validation(data)


ONE_LINE = RegexValidator(
    rf"^[^\x00-\x08\x0a-\x1f\x7f]*[^\x00-\x1f\x7f{WHITE_SPACE}][^\x00-\x08\x0a-\x1f\x7f]*$",
    "must be a single line with a character other than white space")


class TeamUpdateInput(KnownFieldsMixin, serializers.Serializer):
    name = StrictCharField(max_length=100, validators=[NOT_BLANK], required=False, help_text="rename the team")
    run_environment = SingleLineCharField(
        max_length=MAX_RUN_ENVIRONMENT, validators=[ONE_LINE], required=False,
        help_text="the shell line that readies the executor on every node of the team's cluster runs (a virtual "
                  "environment, a module load), or image:NAME, the container image of their Kubernetes PyTorchJob; "
                  "a run's own environment overrides it")


class MemberOutput(serializers.ModelSerializer):
    user_id = serializers.IntegerField()
    username = serializers.CharField(source="user.username")

    class Meta:
        model = Membership
        fields = ["user_id", "username", "role", "created_at"]


class TeamDetailOutput(serializers.ModelSerializer):
    members = MemberOutput(many=True, source="member_rows")

    class Meta:
        model = Team
        fields = ["id", "name", "created_at", "run_environment", "members"]


class MemberAddInput(KnownFieldsMixin, serializers.Serializer):
    username = StrictCharField(validators=[NOT_BLANK])
    role = ChoiceField(choices=GRANTABLE_ROLES, default=Membership.Role.MEMBER,
                       help_text="the owner's role moves only by a transfer")


class MemberRoleInput(KnownFieldsMixin, serializers.Serializer):
    role = ChoiceField(choices=GRANTABLE_ROLES, help_text="the owner's role moves only by a transfer")


class TransferInput(KnownFieldsMixin, serializers.Serializer):
    user_id = IdField(help_text="the member who becomes the owner; you stay on as an admin")


class InvitationCreateInput(KnownFieldsMixin, serializers.Serializer):
    role = ChoiceField(choices=GRANTABLE_ROLES, default=Membership.Role.MEMBER,
                       help_text="the owner's role moves only by a transfer")


class InvitationOutput(serializers.ModelSerializer):
    url = serializers.CharField(help_text="the single-use link; shown only in this response")

    class Meta:
        model = Invitation
        fields = ["id", "team", "role", "expires_at", "url"]


class TokenCreateInput(KnownFieldsMixin, serializers.Serializer):
    name = StrictCharField(max_length=100, validators=[NOT_BLANK])
    expires_in_days = serializers.IntegerField(default=30, min_value=1, max_value=settings.API_TOKEN_MAX_DAYS)


class TokenOutput(serializers.ModelSerializer):
    id = serializers.CharField(source="token_key", help_text="the token's first characters: how it is named in URLs")

    class Meta:
        model = ApiToken
        fields = ["id", "name", "created", "expiry", "last_used_at"]


class TokenCreatedOutput(TokenOutput):
    token = serializers.CharField(help_text="the token itself: shown only in this response, stored hashed")

    class Meta(TokenOutput.Meta):
        fields = TokenOutput.Meta.fields + ["token"]
