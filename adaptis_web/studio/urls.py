from django.urls import path

from adaptis_web.studio import account_views, history_views, url_converters, views  # noqa: F401 (converters)

app_name = "studio"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("upload/", views.upload, name="upload"),
    path("specs/<int:spec_id>/", views.spec_detail, name="spec"),
    path("specs/<int:spec_id>/profile/", views.spec_profile, name="spec-profile"),
    path("jobs/<int:job_id>/", views.job_detail, name="job"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel_view, name="job-cancel"),
    path("plans/<int:plan_id>/run/", views.plan_run, name="plan-run"),
    path("runs/<int:run_id>/", views.run_detail, name="run"),
    path("runs/<int:run_id>/replan/", views.run_replan, name="run-replan"),
    path("runs/<int:run_id>/cancel/", views.run_cancel_view, name="run-cancel"),
    path("history/", history_views.history, name="history"),
    path("<curated_kind:kind>/<int:object_id>/manage/", history_views.curate, name="curate"),
    path("teams/", account_views.team_list, name="teams"),
    path("teams/switch/", account_views.team_switch, name="team-switch"),
    path("teams/<int:team_id>/", account_views.team_detail, name="team"),
    path("invitations/<str:key>/", account_views.invitation, name="invitation"),
    path("account/tokens/", account_views.api_tokens, name="api-tokens"),
    path("account/tokens/<str:token_key>/revoke/", account_views.api_token_revoke, name="api-token-revoke"),
]
