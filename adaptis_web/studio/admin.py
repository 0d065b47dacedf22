from django.contrib import admin

from adaptis_web.studio.models import Membership, ModelSpecRecord, Plan, PlanningJob, Run, Team


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


@admin.register(Plan)
class PlanAdmin(admin.ModelAdmin):
    list_display = ["id", "job", "strategy", "iteration_ms", "bubble_ratio", "created_at"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "plan", "status", "world_size", "steps", "created_at"]
    list_filter = ["status"]
