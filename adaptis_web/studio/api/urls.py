from django.urls import path

from adaptis_web.studio import url_converters  # noqa: F401  (registers curated_kind, curated_action)
from adaptis_web.studio.api import account_views, plan_views, views
from adaptis_web.studio.api.root import ApiRootApi

app_name = "api"

urlpatterns = [
    path("", ApiRootApi.as_view(), name="root"),
    path("teams/", account_views.TeamListCreateApi.as_view(), name="teams"),
    path("teams/<id:team_id>/", account_views.TeamDetailApi.as_view(), name="team"),
    path("teams/<id:team_id>/members/", account_views.TeamMembersApi.as_view(), name="team-members"),
    path("teams/<id:team_id>/members/<id:user_id>/", account_views.TeamMemberApi.as_view(), name="team-member"),
    path("teams/<id:team_id>/leave/", account_views.TeamLeaveApi.as_view(), name="team-leave"),
    path("teams/<id:team_id>/transfer/", account_views.TeamTransferApi.as_view(), name="team-transfer"),
    path("teams/<id:team_id>/invitations/", account_views.TeamInvitationsApi.as_view(), name="team-invitations"),
    path("invitations/<str:key>/accept/", account_views.InvitationAcceptApi.as_view(), name="invitation-accept"),
    path("tokens/", account_views.TokenListCreateApi.as_view(), name="tokens"),
    path("tokens/<str:token_key>/", account_views.TokenDetailApi.as_view(), name="token"),
    path("presets/", views.PresetsApi.as_view(), name="presets"),
    path("specs/", views.SpecListCreateApi.as_view(), name="specs"),
    path("specs/<id:spec_id>/", views.SpecDetailApi.as_view(), name="spec"),
    path("clusters/", views.ClusterListCreateApi.as_view(), name="clusters"),
    path("clusters/<id:cluster_id>/", views.ClusterDetailApi.as_view(), name="cluster"),
    path("specs/<id:spec_id>/profiles/", views.SpecProfilesApi.as_view(), name="spec-profiles"),
    path("profiles/<id:profile_id>/", views.MeasuredProfileApi.as_view(), name="profile"),
    path("jobs/", views.JobListCreateApi.as_view(), name="jobs"),
    path("jobs/<id:job_id>/", views.JobDetailApi.as_view(), name="job"),
    path("jobs/<id:job_id>/cancel/", views.JobCancelApi.as_view(), name="job-cancel"),
    path("plans/", views.PlanListApi.as_view(), name="plans"),
    path("plans/<id:plan_id>/", views.PlanDetailApi.as_view(), name="plan"),
    path("plans/<id:plan_id>/simulate/", plan_views.PlanSimulateApi.as_view(), name="plan-simulate"),
    path("plans/<id:plan_id>/derive/", plan_views.PlanDeriveApi.as_view(), name="plan-derive"),
    path("plans/<id:plan_id>/export/<str:fmt>/", plan_views.PlanExportApi.as_view(), name="plan-export"),
    path("runs/", views.RunListCreateApi.as_view(), name="runs"),
    path("runs/<id:run_id>/", views.RunDetailApi.as_view(), name="run"),
    path("runs/<id:run_id>/events/", views.RunEventsApi.as_view(), name="run-events"),
    path("runs/<id:run_id>/replan/", views.RunReplanApi.as_view(), name="run-replan"),
    path("runs/<id:run_id>/cancel/", views.RunCancelApi.as_view(), name="run-cancel"),
    path("<curated_kind:kind>/<id:object_id>/dependents/", views.DependentsApi.as_view(), name="dependents"),
    path("<curated_kind:kind>/<id:object_id>/<curated_action:action>/", views.CuratedActionApi.as_view(),
         name="curated-action"),
]
