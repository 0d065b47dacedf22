"""REST endpoints of teams (members, roles, invitations, ownership) and of the user's API tokens."""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from adaptis_web.studio.accounts import teams
from adaptis_web.studio.accounts.selectors import (
    team_get_for_user,
    team_list_for_user,
    team_memberships,
    token_get_for_user,
    token_list_for_user,
)
from adaptis_web.studio.accounts.serializers import (
    InvitationCreateInput,
    InvitationOutput,
    MemberAddInput,
    MemberOutput,
    MemberRoleInput,
    TeamCreateInput,
    TeamDetailOutput,
    TeamOutput,
    TeamUpdateInput,
    TokenCreatedOutput,
    TokenCreateInput,
    TokenOutput,
    TransferInput,
)
from adaptis_web.studio.accounts.tokens import token_create, token_revoke
from adaptis_web.studio.models import ApiToken, Team


def _validated(serializer_class, data) -> dict:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def team_detail(team) -> dict:
    team.member_rows = team_memberships(team=team)
    return TeamDetailOutput(team).data


class TeamListCreateApi(ListAPIView):
    serializer_class = TeamOutput

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no user
            return Team.objects.none()
        return team_list_for_user(user=self.request.user).prefetch_related("memberships")

    @extend_schema(request=TeamCreateInput, responses={201: TeamDetailOutput},
                   description="Create a team; you become its owner.")
    def post(self, request):
        team = teams.team_create(name=_validated(TeamCreateInput, request.data)["name"], owner=request.user)
        return Response(team_detail(team), status=status.HTTP_201_CREATED)


class TeamDetailApi(APIView):
    @extend_schema(responses=TeamDetailOutput)
    def get(self, request, team_id: int):
        return Response(team_detail(team_get_for_user(user=request.user, team_id=team_id)))

    @extend_schema(request=TeamUpdateInput, responses=TeamDetailOutput,
                   description="Rename the team, or save the environment its cluster runs start from (admins).")
    def patch(self, request, team_id: int):
        team = team_get_for_user(user=request.user, team_id=team_id)
        teams.team_update(team=team, user=request.user, **_validated(TeamUpdateInput, request.data))
        return Response(team_detail(team))


class TeamMembersApi(APIView):
    @extend_schema(request=MemberAddInput, responses={201: MemberOutput},
                   description="Add a user by username with a role: admin, member or viewer (admins).")
    def post(self, request, team_id: int):
        team = team_get_for_user(user=request.user, team_id=team_id)
        values = _validated(MemberAddInput, request.data)
        membership = teams.member_add_by_username(team=team, by=request.user, username=values["username"],
                                                  role=values["role"])
        return Response(MemberOutput(membership).data, status=status.HTTP_201_CREATED)


class TeamMemberApi(APIView):
    @extend_schema(request=MemberRoleInput, responses=MemberOutput, description="Change a member's role (admins).")
    def patch(self, request, team_id: int, user_id: int):
        team = team_get_for_user(user=request.user, team_id=team_id)
        membership = teams.member_role_change(team=team, by=request.user, user_id=user_id,
                                              role=_validated(MemberRoleInput, request.data)["role"])
        return Response(MemberOutput(membership).data)

    @extend_schema(request=None, responses={204: None},
                   description="Remove a member (admins); your own id leaves the team.")
    def delete(self, request, team_id: int, user_id: int):
        team = team_get_for_user(user=request.user, team_id=team_id)
        teams.member_remove(team=team, by=request.user, user_id=user_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TeamLeaveApi(APIView):
    @extend_schema(request=None, responses={204: None}, description="Leave the team (the owner transfers first).")
    def post(self, request, team_id: int):
        teams.team_leave(team=team_get_for_user(user=request.user, team_id=team_id), user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TeamTransferApi(APIView):
    @extend_schema(request=TransferInput, responses=TeamDetailOutput,
                   description="Make another member the owner (the owner only); you stay on as an admin.")
    def post(self, request, team_id: int):
        team = team_get_for_user(user=request.user, team_id=team_id)
        teams.team_transfer(team=team, by=request.user, user_id=_validated(TransferInput, request.data)["user_id"])
        return Response(team_detail(team))


class TeamInvitationsApi(APIView):
    @extend_schema(request=InvitationCreateInput, responses={201: InvitationOutput},
                   description="A single-use link that adds whoever opens it with the role (admins); it expires "
                               "in 7 days and is shown only in this response.")
    def post(self, request, team_id: int):
        team = team_get_for_user(user=request.user, team_id=team_id)
        invitation, key = teams.invitation_create(team=team, by=request.user,
                                                  role=_validated(InvitationCreateInput, request.data)["role"])
        invitation.url = request.build_absolute_uri(reverse("studio:invitation", args=[key]))
        return Response(InvitationOutput(invitation).data, status=status.HTTP_201_CREATED)


class InvitationAcceptApi(APIView):
    @extend_schema(request=None, responses={201: MemberOutput})
    def post(self, request, key: str):
        membership = teams.invitation_accept(key=key, user=request.user)
        return Response(MemberOutput(membership).data, status=status.HTTP_201_CREATED)


class TokenListCreateApi(ListAPIView):
    serializer_class = TokenOutput
    throttle_scope = "token_create"

    def get_throttles(self):
        return [ScopedRateThrottle()] if self.request.method == "POST" else []

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator has no user
            return ApiToken.objects.none()
        return token_list_for_user(user=self.request.user)

    @extend_schema(request=TokenCreateInput, responses={201: TokenCreatedOutput},
                   description="A new named token with an expiry; the token is in this response only.")
    def post(self, request):
        values = _validated(TokenCreateInput, request.data)
        token, key = token_create(user=request.user, name=values["name"], expires_in_days=values["expires_in_days"])
        token.token = key
        return Response(TokenCreatedOutput(token).data, status=status.HTTP_201_CREATED)


class TokenDetailApi(APIView):
    @extend_schema(request=None, responses={204: None}, description="Revoke the token: it stops working at once.")
    def delete(self, request, token_key: str):
        token_revoke(token=token_get_for_user(user=request.user, token_key=token_key))
        return Response(status=status.HTTP_204_NO_CONTENT)
