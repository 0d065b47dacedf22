"""REST plumbing of a team's history: the list every kind's endpoint is (django-filter's filters, cursor pages),
renaming and soft deletion on every detail endpoint, and ``/api/<kind>/<id>/<action>/`` (archive, unarchive,
restore, dependents). Objects of other teams are 404; what a role may not do is 403 (accounts.roles)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from adaptis_web.studio.history import curation
from adaptis_web.studio.history.filters import HistoryCursorPagination, HistoryFilterBackend
from adaptis_web.studio.history.selectors import curated_get_for_user, history_for_user
from adaptis_web.studio.history.serializers import CuratedOutput, DependentsOutput, RenameInput, RequiredNameInput


class HistoryListApi(ListAPIView):
    """A kind's history: django-filter's filters (``filterset_class``), newest first in cursor pages."""

    pagination_class = HistoryCursorPagination
    filter_backends = [HistoryFilterBackend]
    kind = ""

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # the schema generator, which has no user, reads the filters
            return self.filterset_class.Meta.model.objects.none()
        return history_for_user(user=self.request.user, kind=self.kind)


class CuratedDetailMixin:
    """PATCH renames (``name``), DELETE deletes softly (taking its dependents along)."""

    kind = ""

    def curated_object(self):
        object_id = self.kwargs[f"{self.kind.removesuffix('s')}_id"]  # the detail URL's spec_id, job_id, ...
        return curated_get_for_user(user=self.request.user, kind=self.kind, object_id=object_id)

    def rename(self, request, input_class) -> Response:
        obj = self.curated_object()
        data = input_class(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(curated_output(curation.object_rename(obj=obj, user=request.user,
                                                              name=data.validated_data["name"])))

    @extend_schema(request=RenameInput, responses=CuratedOutput)
    def patch(self, request, **ids):
        return self.rename(request, RenameInput)

    @extend_schema(request=None, responses={200: CuratedOutput},
                   description="Delete softly, with what depends on it (see dependents/); an admin can restore it.")
    def delete(self, request, **ids):
        return Response(curated_output(curation.object_delete(obj=self.curated_object(), user=request.user)))


class NamedDetailMixin(CuratedDetailMixin):
    """PATCH renames (``name``: a spec or a saved cluster keeps one), DELETE deletes softly (with its dependents)."""

    @extend_schema(request=RequiredNameInput, responses=CuratedOutput)
    def patch(self, request, **ids):
        return self.rename(request, RequiredNameInput)


def curated_output(obj) -> dict:
    return CuratedOutput({"id": obj.pk, "name": obj.name, "archived_at": obj.archived_at,
                          "deleted_at": obj.deleted_at}).data


class CuratedActionApi(APIView):
    """``/api/<kind>/<id>/<action>/``: archive, unarchive, restore (admins, a deleted object), dependents."""

    ACTIONS = {"archive": curation.object_archive, "unarchive": curation.object_unarchive,
               "restore": curation.object_restore}

    @extend_schema(request=None, responses=CuratedOutput)
    def post(self, request, kind: str, object_id: int, action: str):
        obj = curated_get_for_user(user=request.user, kind=kind, object_id=object_id,
                                             deleted=action == "restore")
        return Response(curated_output(self.ACTIONS[action](obj=obj, user=request.user)))


class DependentsApi(APIView):
    @extend_schema(responses=DependentsOutput,
                   description="What archiving or deleting this object takes along with it.")
    def get(self, request, kind: str, object_id: int):
        obj = curated_get_for_user(user=request.user, kind=kind, object_id=object_id)
        return Response(DependentsOutput(curation.dependents_summary(obj)).data)
