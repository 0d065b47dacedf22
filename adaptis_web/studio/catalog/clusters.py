"""Saved team clusters: parse an uploaded ``adaptis.cluster/v1`` document, store it for a team, and resolve the
cluster a planning request names (a preset file, a named cluster such as ``h100-sxm-1024x8``, a saved cluster
of the spec's team, or a custom document)."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser

from adaptis_web.studio.catalog.specs import prefixed_error, spec_check_team, upload_text
from adaptis_web.studio.models import ClusterRecord, Team
from planner.service import (
    ACCELERATORS, ClusterSpec, is_cluster_preset, load_cluster, load_cluster_preset, parse_document, preset_names)
from planner.errors import SpecError

MAX_CLUSTER_FILE_BYTES = 256 * 1024
NAMED_CLUSTER_HELP = ("or a named cluster '<device>-<nodes>x<gpus per node>' such as 'h100-sxm-1024x8' (devices: "
                      + ", ".join(ACCELERATORS) + "; 'cpu-1x8' is this host's CPU as 8 local ranks)")


def cluster_parse_upload(*, content: bytes, filename: str = "", field: str = "file") -> ClusterSpec:
    """The cluster in an uploaded JSON or YAML document (``planner.documents``' bounds); SpecError rooted at
    ``field`` otherwise."""
    text = upload_text(content, field=field, limit=MAX_CLUSTER_FILE_BYTES)
    return cluster_parse_doc(doc=parse_document(text, filename, field=field), field=field)


def cluster_parse_doc(*, doc: object, field: str) -> ClusterSpec:
    if not isinstance(doc, dict):
        raise SpecError(field, "must hold an adaptis.cluster/v1 object")
    try:
        return load_cluster(doc)
    except SpecError as error:
        raise prefixed_error(error, field) from None


def cluster_create(*, team: Team, owner: AbstractBaseUser, cluster: ClusterSpec, name: str = "",
                   source_filename: str = "") -> ClusterRecord:
    """Save ``cluster`` for ``team`` (a member or above); the name defaults to the document's."""
    spec_check_team(team=team, user=owner, doing="saving a cluster")
    name = (name or cluster.name).strip()[:200]
    if not name:
        raise SpecError("name", "is required: the document has no name either")
    return ClusterRecord.objects.create(team=team, owner=owner, name=name, doc=cluster.to_dict(),
                                        source_filename=source_filename[:255], num_devices=cluster.num_devices,
                                        device_name=cluster.device.name[:100])


def cluster_preset_load(name: str, field: str = "cluster_preset") -> ClusterSpec:
    """A preset file or a named cluster; SpecError on ``field`` naming both kinds otherwise."""
    try:
        if is_cluster_preset(name):
            return load_cluster_preset(name)
    except SpecError as error:  # a named cluster with a bad size: h100-sxm-0x8
        raise SpecError(field, error.reason) from None
    raise SpecError(field, f"unknown preset {name!r}; known: {', '.join(preset_names())}, {NAMED_CLUSTER_HELP}")


def cluster_resolve(*, cluster_preset: str = "", cluster_doc: dict | None = None,
                    saved: ClusterRecord | None = None, team: Team | None = None,
                    cluster_field: str = "cluster") -> ClusterSpec:
    """The one cluster a request names. ``saved`` must be a cluster of ``team`` (the spec's)."""
    given = [name for name, value in (("cluster_preset", cluster_preset), (cluster_field, cluster_doc),
                                      ("saved_cluster", saved)) if value not in ("", None)]
    if len(given) > 1:
        raise SpecError(given[-1], f"give either a cluster preset or a custom cluster (or a saved cluster), not "
                                   f"several: got {' and '.join(given)}")
    if saved is not None:
        if team is not None and saved.team_id != team.pk:
            raise SpecError("saved_cluster", f"cluster {saved.pk} belongs to team {saved.team.name!r}, the spec "
                                             f"to team {team.name!r}: save the cluster in the spec's team")
        return load_cluster(saved.doc)
    if cluster_doc is not None:
        return cluster_parse_doc(doc=cluster_doc, field=cluster_field)
    if not cluster_preset:
        raise SpecError("cluster_preset", f"is required (one of {', '.join(preset_names())}, "
                                          f"{NAMED_CLUSTER_HELP}) unless a saved or custom cluster is given")
    return cluster_preset_load(cluster_preset)
