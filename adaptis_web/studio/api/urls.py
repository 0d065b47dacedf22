from django.urls import path

from adaptis_web.studio.api import views

app_name = "api"

urlpatterns = [
    path("teams/", views.TeamListApi.as_view(), name="teams"),
    path("presets/", views.PresetsApi.as_view(), name="presets"),
    path("specs/", views.SpecListCreateApi.as_view(), name="specs"),
    path("specs/<int:spec_id>/", views.SpecDetailApi.as_view(), name="spec"),
    path("jobs/", views.JobListCreateApi.as_view(), name="jobs"),
    path("jobs/<int:job_id>/", views.JobDetailApi.as_view(), name="job"),
    path("jobs/<int:job_id>/cancel/", views.JobCancelApi.as_view(), name="job-cancel"),
    path("plans/<int:plan_id>/", views.PlanDetailApi.as_view(), name="plan"),
    path("runs/", views.RunListCreateApi.as_view(), name="runs"),
    path("runs/<int:run_id>/", views.RunDetailApi.as_view(), name="run"),
    path("runs/<int:run_id>/events/", views.RunEventsApi.as_view(), name="run-events"),
    path("runs/<int:run_id>/replan/", views.RunReplanApi.as_view(), name="run-replan"),
]
