from django.urls import path

from adaptis_web.studio import account_views, cluster_views, history_views, plan_views, url_converters, views  # noqa: F401

app_name = "studio"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("upload/", views.upload, name="upload"),
    path("specs/<id:spec_id>/", views.spec_detail, name="spec"),
    path("specs/<id:spec_id>/profile/", views.spec_profile, name="spec-profile"),
    path("clusters/new/", cluster_views.cluster_new, name="cluster-new"),
    path("clusters/<id:cluster_id>/", cluster_views.cluster_detail, name="cluster"),
    path("jobs/<id:job_id>/", views.job_detail, name="job"),
    path("jobs/<id:job_id>/cancel/", views.job_cancel_view, name="job-cancel"),
    path("plans/<id:plan_id>/", plan_views.plan_detail, name="plan"),
    path("plans/<id:plan_id>/run/", views.plan_run, name="plan-run"),
    path("compare/", plan_views.plan_compare, name="compare"),
    path("runs/<id:run_id>/", views.run_detail, name="run"),
    path("runs/<id:run_id>/replan/", views.run_replan, name="run-replan"),
    path("runs/<id:run_id>/cancel/", views.run_cancel_view, name="run-cancel"),
    path("history/", history_views.history, name="history"),
    path("<curated_kind:kind>/<id:object_id>/manage/", history_views.curate, name="curate"),
    path("teams/", account_views.team_list, name="teams"),
    path("teams/switch/", account_views.team_switch, name="team-switch"),
    path("teams/<id:team_id>/", account_views.team_detail, name="team"),
    path("invitations/<str:key>/", account_views.invitation, name="invitation"),
    path("account/tokens/", account_views.api_tokens, name="api-tokens"),
    path("account/tokens/<str:token_key>/revoke/", account_views.api_token_revoke, name="api-token-revoke"),
]
