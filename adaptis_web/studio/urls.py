"""The pages' routes (``studio:``), each to a domain's page view."""

from django.urls import path

from adaptis_web.studio import url_converters  # noqa: F401  (registers id, curated_kind, curated_action)
from adaptis_web.studio.accounts import views as accounts
from adaptis_web.studio.catalog import views as catalog
from adaptis_web.studio.history import views as history
from adaptis_web.studio.planning import plan_views, views as planning
from adaptis_web.studio.runs import views as runs

app_name = "studio"

urlpatterns = [
    path("", history.dashboard, name="dashboard"),
    path("upload/", planning.upload, name="upload"),
    path("specs/<id:spec_id>/", planning.spec_detail, name="spec"),
    path("specs/<id:spec_id>/profile/", runs.spec_profile, name="spec-profile"),
    path("clusters/new/", catalog.cluster_new, name="cluster-new"),
    path("clusters/<id:cluster_id>/", catalog.cluster_detail, name="cluster"),
    path("jobs/<id:job_id>/", planning.job_detail, name="job"),
    path("jobs/<id:job_id>/cancel/", planning.job_cancel_view, name="job-cancel"),
    path("jobs/<id:job_id>/plan-count/", planning.job_plan_count_view, name="job-plan-count"),
    path("plans/<id:plan_id>/", plan_views.plan_detail, name="plan"),
    path("plans/<id:plan_id>/run/", runs.plan_run, name="plan-run"),
    path("compare/", plan_views.plan_compare, name="compare"),
    path("runs/<id:run_id>/", runs.run_detail, name="run"),
    path("runs/<id:run_id>/replan/", runs.run_replan, name="run-replan"),
    path("runs/<id:run_id>/cancel/", runs.run_cancel_view, name="run-cancel"),
    path("history/", history.history, name="history"),
    path("<curated_kind:kind>/<id:object_id>/manage/", history.curate, name="curate"),
    path("teams/", accounts.team_list, name="teams"),
    path("teams/switch/", accounts.team_switch, name="team-switch"),
    path("teams/<id:team_id>/", accounts.team_detail, name="team"),
    path("invitations/<str:key>/", accounts.invitation, name="invitation"),
    path("account/tokens/", accounts.api_tokens, name="api-tokens"),
    path("account/tokens/<str:token_key>/revoke/", accounts.api_token_revoke, name="api-token-revoke"),
]
