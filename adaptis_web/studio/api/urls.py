"""The REST API's routes, each domain's endpoints under one prefix (``api:``)."""

from django.urls import path

from adaptis_web.studio import url_converters  # noqa: F401  (registers curated_kind, curated_action)
from adaptis_web.studio.accounts import api as accounts
from adaptis_web.studio.api.root import ApiRootApi
from adaptis_web.studio.catalog import api as catalog
from adaptis_web.studio.history import api as history
from adaptis_web.studio.planning import api as planning
from adaptis_web.studio.runs import api as runs

app_name = "api"

urlpatterns = [
    path("", ApiRootApi.as_view(), name="root"),
    path("teams/", accounts.TeamListCreateApi.as_view(), name="teams"),
    path("teams/<id:team_id>/", accounts.TeamDetailApi.as_view(), name="team"),
    path("teams/<id:team_id>/members/", accounts.TeamMembersApi.as_view(), name="team-members"),
    path("teams/<id:team_id>/members/<id:user_id>/", accounts.TeamMemberApi.as_view(), name="team-member"),
    path("teams/<id:team_id>/leave/", accounts.TeamLeaveApi.as_view(), name="team-leave"),
    path("teams/<id:team_id>/transfer/", accounts.TeamTransferApi.as_view(), name="team-transfer"),
    path("teams/<id:team_id>/invitations/", accounts.TeamInvitationsApi.as_view(), name="team-invitations"),
    path("invitations/<str:key>/accept/", accounts.InvitationAcceptApi.as_view(), name="invitation-accept"),
    path("tokens/", accounts.TokenListCreateApi.as_view(), name="tokens"),
    path("tokens/<str:token_key>/", accounts.TokenDetailApi.as_view(), name="token"),
    path("presets/", planning.PresetsApi.as_view(), name="presets"),
    path("specs/", catalog.SpecListCreateApi.as_view(), name="specs"),
    path("specs/<id:spec_id>/", catalog.SpecDetailApi.as_view(), name="spec"),
    path("clusters/", catalog.ClusterListCreateApi.as_view(), name="clusters"),
    path("clusters/<id:cluster_id>/", catalog.ClusterDetailApi.as_view(), name="cluster"),
    path("specs/<id:spec_id>/profiles/", runs.SpecProfilesApi.as_view(), name="spec-profiles"),
    path("profiles/<id:profile_id>/", runs.MeasuredProfileApi.as_view(), name="profile"),
    path("jobs/", planning.JobListCreateApi.as_view(), name="jobs"),
    path("jobs/<id:job_id>/", planning.JobDetailApi.as_view(), name="job"),
    path("jobs/<id:job_id>/cancel/", planning.JobCancelApi.as_view(), name="job-cancel"),
    path("plans/", planning.PlanListApi.as_view(), name="plans"),
    path("plans/<id:plan_id>/", planning.PlanDetailApi.as_view(), name="plan"),
    path("plans/<id:plan_id>/simulate/", planning.PlanSimulateApi.as_view(), name="plan-simulate"),
    path("plans/<id:plan_id>/derive/", planning.PlanDeriveApi.as_view(), name="plan-derive"),
    path("plans/<id:plan_id>/export/<str:fmt>/", planning.PlanExportApi.as_view(), name="plan-export"),
    path("runs/", runs.RunListCreateApi.as_view(), name="runs"),
    path("runs/<id:run_id>/", runs.RunDetailApi.as_view(), name="run"),
    path("runs/<id:run_id>/events/", runs.RunEventsApi.as_view(), name="run-events"),
    path("runs/<id:run_id>/replan/", runs.RunReplanApi.as_view(), name="run-replan"),
    path("runs/<id:run_id>/cancel/", runs.RunCancelApi.as_view(), name="run-cancel"),
    path("<curated_kind:kind>/<id:object_id>/dependents/", history.DependentsApi.as_view(), name="dependents"),
    path("<curated_kind:kind>/<id:object_id>/<curated_action:action>/", history.CuratedActionApi.as_view(),
         name="curated-action"),
]
