from django.urls import path

from adaptis_web.studio import views

app_name = "studio"

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("upload/", views.upload, name="upload"),
    path("specs/<int:spec_id>/", views.spec_detail, name="spec"),
    path("jobs/<int:job_id>/", views.job_detail, name="job"),
    path("jobs/<int:job_id>/cancel/", views.job_cancel_view, name="job-cancel"),
    path("plans/<int:plan_id>/run/", views.plan_run, name="plan-run"),
    path("runs/<int:run_id>/", views.run_detail, name="run"),
    path("runs/<int:run_id>/replan/", views.run_replan, name="run-replan"),
    path("account/token/", views.api_token, name="api-token"),
]
