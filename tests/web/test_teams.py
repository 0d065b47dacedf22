"""Teams through the API and the pages: create, add by username or by a single-use link, change a role, remove,
leave, transfer the ownership, switch between teams; bad input is a 400 naming the field, and nothing is stored."""

import re

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from adaptis_web.studio.models import Invitation, Membership, Team


def api_as(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def roles(team) -> dict:
    return dict(Membership.objects.filter(team=team).values_list("user__username", "role"))


class TestTeamApi:
    def test_creating_a_team_makes_its_creator_the_owner(self, people):
        response = api_as(people.member).post(reverse("api:teams"), {"name": "inference"}, format="json")
        assert response.status_code == 201
        body = response.json()
        assert body["name"] == "inference" and body["members"] == [
            {"user_id": people.member.pk, "username": "bob", "role": "owner", "created_at": body["members"][0]["created_at"]}]
        teams = api_as(people.member).get(reverse("api:teams")).json()["results"]
        assert {(team["name"], team["role"]) for team in teams} == {("inference", "owner"), ("pipeline-team", "member")}

    @pytest.mark.parametrize("name, status, reason", [
        ("", 400, "This field may not be blank."),
        ("Pipeline-Team", 409, "a team named 'Pipeline-Team' already exists"),  # valid, but the name is taken
        ("x" * 101, 400, "Ensure this field has no more than 100 characters.")])
    def test_a_bad_team_name_is_refused_and_nothing_is_stored(self, people, name, status, reason):
        response = api_as(people.member).post(reverse("api:teams"), {"name": name}, format="json")
        assert response.status_code == status
        assert response.json() == {"errors": [{"field": "name", "reason": reason}]}
        assert Team.objects.count() == 2 and Membership.objects.count() == 3

    def test_an_admin_adds_a_member_by_username_with_a_role(self, crew):
        response = api_as(crew.admin).post(reverse("api:team-members", args=[crew.people.team.pk]),
                                           {"username": "mallory", "role": "viewer"}, format="json")
        assert response.status_code == 201 and response.json()["role"] == "viewer"
        assert roles(crew.people.team)["mallory"] == "viewer"

    @pytest.mark.parametrize("data, status, field, reason", [
        ({"username": "nobody", "role": "member"}, 404, "username", "no user named 'nobody'"),
        ({"username": "bob", "role": "member"}, 409, "username", "'bob' is already a member of team 'pipeline-team'"),
        ({"username": "mallory", "role": "owner"}, 400, "role",
         '"owner" is not a valid choice; give one of admin, member, viewer.'),
        ({"role": "member"}, 400, "username", "This field is required."),
    ])
    def test_adding_a_member_with_bad_input_is_refused_naming_the_field(self, crew, data, status, field, reason):
        before = roles(crew.people.team)
        response = api_as(crew.people.owner).post(reverse("api:team-members", args=[crew.people.team.pk]), data,
                                                  format="json")
        assert response.status_code == status
        (error,) = response.json()["errors"]
        assert error["field"] == field and error["reason"].startswith(reason)
        assert roles(crew.people.team) == before

    def test_an_admin_changes_a_role_and_removes_a_member(self, crew):
        client, team = api_as(crew.admin), crew.people.team
        assert client.patch(reverse("api:team-member", args=[team.pk, crew.viewer.pk]), {"role": "member"},
                            format="json").json()["role"] == "member"
        assert client.delete(reverse("api:team-member", args=[team.pk, crew.extra.pk])).status_code == 204
        assert roles(team) == {"alice": "owner", "carol": "admin", "bob": "member", "victor": "member"}

    def test_the_owners_role_moves_only_by_a_transfer(self, crew):
        team = crew.people.team
        response = api_as(crew.admin).patch(reverse("api:team-member", args=[team.pk, crew.people.owner.pk]),
                                            {"role": "viewer"}, format="json")
        assert response.status_code == 403
        assert response.json()["errors"][0]["reason"] == ("the owner's role changes only when they transfer the "
                                                          "ownership")
        assert api_as(crew.admin).delete(reverse("api:team-member", args=[team.pk, crew.people.owner.pk])
                                         ).status_code == 403
        assert roles(team)["alice"] == "owner"

    def test_transferring_the_ownership_keeps_the_old_owner_as_an_admin(self, crew):
        team = crew.people.team
        response = api_as(crew.people.owner).post(reverse("api:team-transfer", args=[team.pk]),
                                                  {"user_id": crew.people.member.pk}, format="json")
        assert response.status_code == 200
        assert roles(team) == {"alice": "admin", "carol": "admin", "bob": "owner", "victor": "viewer", "erin": "member"}
        # and now the old owner may leave, which an owner may not
        assert api_as(crew.people.owner).post(reverse("api:team-leave", args=[team.pk])).status_code == 204
        assert api_as(crew.people.member).post(reverse("api:team-leave", args=[team.pk])).status_code == 403

    def test_transferring_to_someone_outside_the_team_is_a_404_naming_the_user(self, crew):
        response = api_as(crew.people.owner).post(reverse("api:team-transfer", args=[crew.people.team.pk]),
                                                  {"user_id": crew.people.outsider.pk}, format="json")
        assert response.status_code == 404 and response.json()["errors"][0]["field"] == "user"
        assert roles(crew.people.team)["alice"] == "owner"

    def test_a_member_who_leaves_no_longer_sees_the_team(self, crew):
        team, client = crew.people.team, api_as(crew.people.member)
        assert client.post(reverse("api:team-leave", args=[team.pk])).status_code == 204
        assert client.get(reverse("api:job", args=[crew.planned.job.pk])).status_code == 404
        assert client.get(reverse("api:teams")).json()["results"] == []


class TestInvitations:
    def _invite(self, crew, role="member") -> str:
        response = api_as(crew.admin).post(reverse("api:team-invitations", args=[crew.people.team.pk]),
                                           {"role": role}, format="json")
        assert response.status_code == 201
        return response.json()["url"]

    def test_an_invitation_link_adds_whoever_opens_it_once(self, crew):
        url = self._invite(crew, role="viewer")
        key = url.rstrip("/").rsplit("/", 1)[1]
        assert Invitation.objects.get().key_digest != key, "only the key's digest is stored"
        response = api_as(crew.people.outsider).post(reverse("api:invitation-accept", args=[key]))
        assert response.status_code == 201 and roles(crew.people.team)["mallory"] == "viewer"
        stranger = type(crew.people.owner).objects.create_user("sam", password="sam-pass-2026")
        again = api_as(stranger).post(reverse("api:invitation-accept", args=[key]))
        assert again.status_code == 409
        assert again.json() == {"errors": [{"field": "key", "reason": "this invitation has already been used"}]}
        assert "sam" not in roles(crew.people.team)

    def test_an_expired_or_unknown_invitation_is_refused(self, crew):
        key = self._invite(crew).rstrip("/").rsplit("/", 1)[1]
        Invitation.objects.update(expires_at="2020-01-01T00:00:00Z")
        response = api_as(crew.people.outsider).post(reverse("api:invitation-accept", args=[key]))
        assert response.status_code == 409 and "expired" in response.json()["errors"][0]["reason"]
        unknown = api_as(crew.people.outsider).post(reverse("api:invitation-accept", args=["not-a-key"]))
        assert unknown.status_code == 404
        assert unknown.json() == {"errors": [{"field": "key", "reason": "no such invitation"}]}
        assert "mallory" not in roles(crew.people.team)

    def test_the_invitation_page_joins_the_team_in_the_browser_flow(self, client, crew):
        url = self._invite(crew)
        client.force_login(crew.people.outsider)
        page = client.get(url)
        assert page.status_code == 200 and "join <strong>pipeline-team</strong> as a <strong>member" in page.content.decode()
        response = client.post(url)
        assert response.status_code == 302 and response.url == reverse("studio:team", args=[crew.people.team.pk])
        assert roles(crew.people.team)["mallory"] == "member"


class TestTeamPages:
    def test_create_a_team_and_work_in_it(self, client, people):
        client.force_login(people.member)
        response = client.post(reverse("studio:teams"), {"name": "bob's lab"})
        team = Team.objects.get(name="bob's lab")
        assert response.status_code == 302 and response.url == reverse("studio:team", args=[team.pk])
        assert roles(team) == {"bob": "owner"}
        assert "Team <strong>bob&#x27;s lab</strong> (owner)" in client.get(reverse("studio:dashboard")).content.decode()

    def test_a_user_in_two_teams_switches_between_them(self, client, people, planned):
        other = Team.objects.get(name="other-team")
        Membership.objects.create(team=other, user=people.member, role="viewer")
        client.force_login(people.member)
        job_link = f'href="{reverse("studio:job", args=[planned.job.pk])}"'
        first = client.get(reverse("studio:dashboard")).content.decode()
        assert "Team <strong>other-team</strong> (viewer)" in first and job_link not in first  # first by name
        response = client.post(reverse("studio:team-switch"), {"team": people.team.pk, "next": "/history/"})
        assert response.status_code == 302 and response.url == "/history/"
        switched = client.get(reverse("studio:dashboard")).content.decode()
        assert "Team <strong>pipeline-team</strong> (member)" in switched and job_link in switched

    def test_switching_to_a_team_one_is_not_in_is_a_404(self, client, people):
        client.force_login(people.member)
        assert client.post(reverse("studio:team-switch"), {"team": people.outsider_team.pk}).status_code == 404

    def test_the_team_page_shows_members_and_admin_controls_to_admins_only(self, client, crew):
        client.force_login(crew.admin)
        page = client.get(reverse("studio:team", args=[crew.people.team.pk])).content.decode()
        assert re.findall(r'data-member="(\w+)"', page) == ["alice", "carol", "bob", "erin", "victor"]
        assert 'id="add-member"' in page and 'id="invite"' in page
        client.force_login(crew.viewer)
        page = client.get(reverse("studio:team", args=[crew.people.team.pk])).content.decode()
        assert 'id="add-member"' not in page and 'id="invite"' not in page and 'id="leave"' in page

    def test_an_invitation_created_on_the_page_is_shown_once(self, client, crew):
        client.force_login(crew.people.owner)
        response = client.post(reverse("studio:team", args=[crew.people.team.pk]), {"action": "invite", "role": "viewer"})
        assert response.status_code == 201
        url = re.search(r"data-invitation-url>([^<]+)<", response.content.decode()).group(1)
        assert "/invitations/" in url
        assert url not in client.get(reverse("studio:team", args=[crew.people.team.pk])).content.decode()

    def test_adding_an_unknown_user_on_the_page_shows_the_reason(self, client, crew):
        client.force_login(crew.people.owner)
        response = client.post(reverse("studio:team", args=[crew.people.team.pk]),
                               {"action": "add", "username": "nobody", "role": "member"})
        assert response.status_code == 400 and "no user named &#x27;nobody&#x27;" in response.content.decode()


@pytest.mark.django_db
def test_a_forms_empty_team_name_or_environment_is_refused_as_jsons_is_and_nothing_changes(crew):
    """A form-encoded PATCH with ``name=`` was answered 200 and changed nothing (DRF reads a form's empty value for an
    optional field as "not given"); the schema says a name is never blank, and JSON's "" is refused."""
    from urllib.parse import urlencode
    team = crew.people.team
    name, environment = team.name, team.run_environment
    for field in ("name", "run_environment"):
        response = api_as(crew.admin).patch(reverse("api:team", args=[team.pk]), urlencode({field: ""}),
                                            content_type="application/x-www-form-urlencoded")
        assert response.status_code == 400, response.content
        assert response.json() == {"errors": [{"field": field, "reason": "This field may not be blank."}]}
    team.refresh_from_db()
    assert (team.name, team.run_environment) == (name, environment)
    renamed = api_as(crew.admin).patch(reverse("api:team", args=[team.pk]), urlencode({"name": "renamed"}),
                                       content_type="application/x-www-form-urlencoded")
    assert renamed.status_code == 200 and renamed.json()["name"] == "renamed"
