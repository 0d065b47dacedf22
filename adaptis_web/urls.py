from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerView

from adaptis_web.health import healthz
from adaptis_web.studio.api.schema import SchemaView

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/schema/", SchemaView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/", include("adaptis_web.studio.api.urls")),
    path("", include("adaptis_web.studio.urls")),
]

handler400 = "adaptis_web.request_errors.bad_request"
handler404 = "adaptis_web.request_errors.not_found"
handler500 = "adaptis_web.request_errors.server_error"
