from django.apps import AppConfig


class StudioConfig(AppConfig):
    name = "adaptis_web.studio"
    label = "studio"
    verbose_name = "AdaPtis Studio"
