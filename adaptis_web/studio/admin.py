from django.contrib import admin
from knox.models import AuthToken

from adaptis_web.studio.models import ApiToken, Membership, ModelSpecRecord, Plan, PlanningJob, Run, Team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]
    inlines = [MembershipInline]


@admin.register(ModelSpecRecord)
class ModelSpecRecordAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "owner", "num_layers", "created_at"]
    list_filter = ["team"]


@admin.register(PlanningJob)
class PlanningJobAdmin(admin.ModelAdmin):
    list_display = ["id", "spec", "schedule", "num_devices", "num_microbatches", "status", "created_at"]
    list_filter = ["status", "schedule"]
    readonly_fields = ["cluster_doc"]  # its plans were simulated on it (planning.predictions keeps those)


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "strategy", "iteration_ms", "bubble_ratio", "created_at"]
    # Written once, when the plan is made (an edited plan is a new, derived one): planning.predictions keeps the
    # prediction of a plan by its id.
    readonly_fields = ["plan_doc", "profile_doc", "simulation"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "plan", "status", "world_size", "steps", "created_at"]
    list_filter = ["status"]


# knox registers its own token model, which ours replaces (KNOX_TOKEN_MODEL): it has no table here.
if admin.site.is_registered(AuthToken):
    admin.site.unregister(AuthToken)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are made by their users (shown once); here they can only be looked at and revoked."""

    list_display = ["name", "user", "token_key", "created", "expiry", "last_used_at"]
    search_fields = ["name", "user__username", "token_key"]
    fields = readonly_fields = ["name", "user", "token_key", "created", "expiry", "last_used_at"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
