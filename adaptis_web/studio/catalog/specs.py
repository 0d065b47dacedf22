"""Model specs: parse an uploaded file, store the validated document for a team."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser

from adaptis_web.studio.accounts.roles import Role, role_require
from adaptis_web.studio.accounts.selectors import user_is_member
from adaptis_web.studio.models import ModelSpecRecord, Team
from planner.errors import SpecError
from planner.service import ModelSpec, load_model_spec, parse_model_document

MAX_SPEC_FILE_BYTES = 2 * 1024 * 1024


def prefixed_error(error: SpecError, prefix: str) -> SpecError:
    """``error`` re-rooted under the request field that carried the document (``file.layers[3].mlp``)."""
    if error.field in ("", "file", prefix):  # the planner names the whole document "file"
        return SpecError(prefix, error.reason)
    return SpecError(f"{prefix}.{error.field}", error.reason)


def read_upload(upload, *, field: str, limit: int = MAX_SPEC_FILE_BYTES) -> bytes:
    """An uploaded file's bytes, refused by its size before anything is read."""
    if upload.size > limit:
        raise SpecError(field, f"is {upload.size} bytes; the limit is {limit} bytes")
    return upload.read()


def upload_text(content: bytes, *, field: str, limit: int) -> str:
    """An uploaded document's bytes as text: at most ``limit`` bytes of UTF-8, else a SpecError on ``field``."""
    if len(content) > limit:
        raise SpecError(field, f"is {len(content)} bytes; the limit is {limit} bytes")
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SpecError(field, f"is not UTF-8 text (invalid byte at offset {error.start})") from None


def spec_parse_upload(*, content: bytes, filename: str, field: str = "file",
                      name: str = "") -> tuple[ModelSpec, list[dict]]:
    """The ModelSpec in an uploaded file (ours in JSON/YAML, or a HF config.json), and the warnings about what it
    accepted but probably not as meant (``planner.spec.files.parse_model_document``), as ``{field, reason}``.

    Errors and warnings are rooted at ``field``, the request field that carried the document: ``file.layers[3].mlp``.
    ``name``: the name a HF config that names no model takes (``parse_model_document``).
    """
    text = upload_text(content, field=field, limit=MAX_SPEC_FILE_BYTES)
    try:
        spec, warnings = parse_model_document(text, filename, name)
    except SpecError as error:
        raise prefixed_error(error, field) from None
    return spec, [prefixed_error(SpecError(warning.field, warning.reason), field).to_dict() for warning in warnings]


def spec_check_team(*, team: Team | None, user: AbstractBaseUser, doing: str) -> Team:
    """``team`` when ``user`` may create in it (a member or above): a SpecError on ``team`` for a team they
    are not in, a RoleRefusal for a viewer."""
    if team is None:
        raise SpecError("team", "is required: you belong to no team yet; ask a team owner to add you")
    if not user_is_member(user=user, team=team):
        raise SpecError("team", f"you are not a member of team {team.name!r}")
    role_require(user=user, team=team, at_least=Role.MEMBER, doing=doing)
    return team


def spec_create(*, team: Team, owner: AbstractBaseUser, spec: ModelSpec, source_filename: str = "",
                name: str = "", warnings: list[dict] = ()) -> ModelSpecRecord:
    """The team's spec of this name and document: the one already stored when the same model is uploaded again
    (the same preset twice is one spec, and keeps the warnings of every upload of it), else a new one.
    ``warnings``: the upload's (``spec_parse_upload``), kept on the spec's page and in the API."""
    spec_check_team(team=team, user=owner, doing="uploading a spec")
    name, doc = name or spec.name, spec.to_dict()
    # Compared in Python: JSON equality in the database depends on the backend's key order (SQLite's text).
    for record in ModelSpecRecord.objects.filter(team=team, name=name, deleted_at__isnull=True).order_by("id"):
        if record.doc == doc:
            new = [warning for warning in warnings if warning not in record.warnings]
            if new:
                record.warnings = record.warnings + new
                record.save(update_fields=["warnings"])
            return record
    return ModelSpecRecord.objects.create(team=team, owner=owner, name=name, doc=doc, warnings=list(warnings),
                                          source_filename=source_filename[:255], num_layers=spec.num_layers)


def spec_for_shape(*, record: ModelSpecRecord, spec: ModelSpec, user: AbstractBaseUser) -> ModelSpecRecord:
    """The stored spec a job of ``spec`` plans: ``record`` itself, or, where the job asked for another sequence length
    or micro-batch size (``planner.service.model_with_shape``), that shape of it, stored once beside it under a name
    that says the shape (its profiles and jobs are that shape's)."""
    stored = load_model_spec(record.doc)
    if (spec.seq_len, spec.micro_batch_size) == (stored.seq_len, stored.micro_batch_size):
        return record
    name = f"{record.name} · seq {spec.seq_len:,} · mbs {spec.micro_batch_size}"
    return spec_create(team=record.team, owner=user, spec=spec, source_filename=record.source_filename,
                       name=name[:200])
