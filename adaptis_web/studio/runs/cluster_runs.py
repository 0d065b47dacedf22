"""Runs on a user's own cluster: created here with a secret, launched by the user (torchrun on each node, or the
Slurm batch script written here), reporting their events to the ingest (``POST /api/runs/ID/events/``).

A cluster run is created waiting for its ranks (queued, with no Celery task: the warden neither re-sends it nor
takes it for lost while it waits, ``work.liveness``) together with a secret that is shown once to its creator and
stored only as its SHA-256. The ranks send that secret with every batch (``executor.running.events.HttpSink``); it
opens the ingest of that one run and nothing else, and no longer once the run has finished. Every accepted batch is a
sign of life (``heartbeat_at``): a cluster run whose ranks fall silent is reaped like a local one whose worker died, and
one whose ranks never report is failed after ``CLUSTER_RUN_START_TIMEOUT_S``.

The ingest checks each event against the plan (a rank the plan does not have, a device that is not the rank's
pipeline rank, an action not among its device's actions, a collective of a group the plan does not have, a time that
is not a finite number is refused by name, nothing of the batch stored), stores an action or a collective once
however often it arrives (ranks retry a batch whose answer they missed), and records the lifecycle: ``run_started``
(with what ran it: hosts, devices, torch and NCCL versions) makes the run running, ``run_finished`` succeeded with
its summary and losses, ``run_failed`` failed with the rank's error.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import secrets
import shlex
import uuid
from typing import Callable

import yaml

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from adaptis_web.studio.catalog.specs import spec_check_team
from adaptis_web.studio.models import JobStatus, Plan, Run
from adaptis_web.studio.runs.live_events import RunEventStore
from adaptis_web.studio.runs.local_runs import MAX_RUN_STEPS, plan_execution
from executor.service import HTTP_BATCH_EVENTS
from planner.service import load_cluster, load_parallel, parse_action
from planner.errors import SpecError

RENDEZVOUS_PORT = 29500
DEFAULT_ENVIRONMENT = "source .venv/bin/activate   # the environment every node runs the executor from"
DEFAULT_TIME_LIMIT = "01:00:00"
IMAGE_PREFIX = "image:"  # an environment naming a container image (the Kubernetes PyTorchJob's) instead of a line
IMAGE_PLACEHOLDER = "registry.example.com/your-team/adaptis-executor:latest"
KUBERNETES_FILES_DIR = "/adaptis"  # the ConfigMap of the run's files, mounted as the ranks' working directory
KUBERNETES_TOKEN_DIR = "/var/run/secrets/adaptis"  # the Secret of the run's secret, mounted read-only
LIFECYCLE = ("run_started", "run_finished", "run_failed", "run_cancelled")
TIMED = ("action", "collective")   # the events stored as rows (runs.live_events.RunEventStore)
COLLECTIVE_OP_LENGTH = 40   # RunCollective.op
COLLECTIVE_OP = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)+")   # its group first: tp_all_gather


class IngestRefusal(Exception):
    """A batch refused as a whole: ``status`` (403 for the secret, 400 for the content), ``field`` and ``reason``."""

    def __init__(self, status: int, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.status, self.field, self.reason = status, field, reason


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def cluster_run_create(*, plan: Plan, user: AbstractBaseUser, steps: int, environment: str | None = None,
                       time_limit: str = DEFAULT_TIME_LIMIT) -> tuple[Run, str]:
    """A run of ``plan`` that the user launches on their cluster, and its secret (shown once, stored as a digest).
    ``environment``: the shell line that readies the executor on every node (or ``image:NAME``), by default the
    one the plan's team saved (``Team.run_environment``), else ``DEFAULT_ENVIRONMENT``; ``time_limit``: Slurm's
    ``--time``."""
    team = plan.job.spec.team
    spec_check_team(team=team, user=user, doing="starting a run")
    environment = environment or team.run_environment or DEFAULT_ENVIRONMENT
    execution = plan_execution(plan)   # a cluster starts as many ranks as the plan has GPUs: no host bound
    if execution.execution_refusal is not None:
        raise execution.execution_refusal
    if not 1 <= steps <= MAX_RUN_STEPS:
        raise SpecError("steps", f"must be between 1 and {MAX_RUN_STEPS}; got {steps}")
    secret = secrets.token_urlsafe(32)
    run = Run.objects.create(plan=plan, created_by=user, target="cluster", backend=collective_backend(plan),
                             world_size=execution.world_size, steps=steps, secret_digest=_digest(secret),
                             launch_options={"environment": environment, "time_limit": time_limit},
                             celery_task_id=str(uuid.uuid4()))
    return run, secret


def collective_backend(plan: Plan) -> str:
    """NCCL on GPUs, gloo on a CPU cluster (``cpu-host``)."""
    return "gloo" if load_cluster(plan.job.cluster_doc).is_cpu else "nccl"


def _layout(run: Run) -> tuple[int, int]:
    """(nodes, ranks per node) of a run: the plan's devices packed onto the job's cluster's nodes."""
    per_node = min(load_cluster(run.plan.job.cluster_doc).devices_per_node, run.world_size)
    return math.ceil(run.world_size / per_node), per_node


def launch(run: Run, *, ingest_url: str) -> dict:
    """How to launch a cluster run: the files its ranks read, the ``torchrun`` command every node runs (``$HEAD``:
    the first node's address; ``$ADAPTIS_RDZV_PORT``: its rendezvous port, 29500 by default), a complete Slurm
    batch script that writes the files, finds ``$HEAD`` and ``srun``s the command on every node, and a Kubernetes
    PyTorchJob (Kubeflow training operator) that runs the same command in every pod. The secret is read from
    ``$ADAPTIS_TOKEN_FILE``, never written here."""
    nodes, per_node = _layout(run)
    environment = run.launch_options.get("environment", DEFAULT_ENVIRONMENT)
    time_limit = run.launch_options.get("time_limit", DEFAULT_TIME_LIMIT)
    plan_file, model_file = f"adaptis-run-{run.pk}-plan.json", f"adaptis-run-{run.pk}-model.json"
    torchrun = " ".join([
        "torchrun", f"--nnodes={nodes}", f"--nproc-per-node={per_node}", "--rdzv-backend=c10d",
        f'--rdzv-endpoint="$HEAD:${{ADAPTIS_RDZV_PORT:-{RENDEZVOUS_PORT}}}"', f"--rdzv-id=adaptis-run-{run.pk}",
        "-m", "executor", "run", plan_file, "--model", model_file, "--backend", run.backend,
        "--steps", str(run.steps), "--events", shlex.quote(ingest_url), '--token-file "$ADAPTIS_TOKEN_FILE"'])
    files = {plan_file: run.plan.plan_doc, model_file: run.plan.job.spec.doc}
    image = environment.removeprefix(IMAGE_PREFIX).strip() if environment.startswith(IMAGE_PREFIX) else ""
    gpus = [f"#SBATCH --gpus-per-node={per_node}"] if run.backend == "nccl" else []
    writes = [line for name, doc in files.items()
              for line in (f"cat > {name} <<'ADAPTIS_DOCUMENT'", json.dumps(doc), "ADAPTIS_DOCUMENT")]
    sbatch = "\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name=adaptis-run-{run.pk}", f"#SBATCH --nodes={nodes}", "#SBATCH --ntasks-per-node=1",
        *gpus, f"#SBATCH --time={time_limit}",
        "set -euo pipefail",
        f"# Run {run.pk}'s secret was shown once when it was created: keep it in a file only you can read and",
        "# submit with ADAPTIS_TOKEN_FILE=/path/to/it sbatch this-script.",
        f': "${{ADAPTIS_TOKEN_FILE:?set ADAPTIS_TOKEN_FILE to the file holding the secret of run {run.pk}}}"',
        f"# {environment} -- a container image: run this script in it (e.g. srun --container-image)" if image
        else environment,
        *writes,
        'HEAD=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f"srun --kill-on-bad-exit=1 {torchrun}",
        ""])
    return {"nodes": nodes, "ranks_per_node": per_node, "backend": run.backend, "files": files,
            "torchrun": torchrun, "sbatch": sbatch,
            "kubernetes": _pytorch_job(run, nodes=nodes, per_node=per_node, files=files, torchrun=torchrun,
                                       image=image)}


def _pytorch_job(run: Run, *, nodes: int, per_node: int, files: dict, torchrun: str, image: str) -> str:
    """The run as a Kubernetes PyTorchJob of the Kubeflow training operator, with the ConfigMap of its files: one
    Master and ``nodes - 1`` Worker pods, each running the same ``torchrun`` command with ``nproc-per-node`` ranks,
    its c10d rendezvous at the Master, whose address and port the operator gives every pod (``MASTER_ADDR``,
    ``MASTER_PORT``; ``localhost`` on the Master itself, whose agent then hosts the rendezvous). The secret comes
    from a Kubernetes Secret, mounted as the token file. ``image``: the container image, the environment the
    executor runs in (the team's environment ``image:NAME``), else a placeholder."""
    name = f"adaptis-run-{run.pk}"
    script = "\n".join([
        'HEAD="$MASTER_ADDR"; ADAPTIS_RDZV_PORT="$MASTER_PORT"   # the Master pod, as the operator gives it',
        f"exec {torchrun}"])
    resources = {"limits": {"nvidia.com/gpu": per_node}} if run.backend == "nccl" else {
        "requests": {"cpu": per_node}}

    def replica(count: int) -> dict:
        return {"replicas": count, "restartPolicy": "Never", "template": {"spec": {
            "containers": [{
                "name": "pytorch",  # the operator's name for the container it configures
                "image": image or IMAGE_PLACEHOLDER,
                "workingDir": KUBERNETES_FILES_DIR,
                "command": ["/bin/bash", "-c", script],
                "env": [{"name": "ADAPTIS_TOKEN_FILE", "value": f"{KUBERNETES_TOKEN_DIR}/token"}],
                "resources": resources,
                "volumeMounts": [{"name": "run-files", "mountPath": KUBERNETES_FILES_DIR, "readOnly": True},
                                 {"name": "run-secret", "mountPath": KUBERNETES_TOKEN_DIR, "readOnly": True}]}],
            "volumes": [{"name": "run-files", "configMap": {"name": name}},
                        {"name": "run-secret", "secret": {"secretName": name, "defaultMode": 0o400}}]}}}

    replicas = {"Master": replica(1), **({"Worker": replica(nodes - 1)} if nodes > 1 else {})}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                  "data": {file: json.dumps(doc) for file, doc in files.items()}}
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
           "spec": {"nprocPerNode": str(per_node), "runPolicy": {"backoffLimit": 0},
                    "pytorchReplicaSpecs": replicas}}
    header = [
        f"# Run {run.pk} as a PyTorchJob of the Kubeflow training operator. Its secret was shown once when it was",
        "# created: store it as a Kubernetes Secret first, then apply this file:",
        f"#   kubectl create secret generic {name} --from-file=token=/path/to/the/secret",
        "#   kubectl apply -f this-file.yaml",
        *([] if image else ["# image: the executor's container image (save the team's run environment as image:NAME"
                            " to have it here)."]),
        ""]
    dump = {"Dumper": _BlockDumper, "sort_keys": False, "default_flow_style": False, "width": 1 << 20}
    return "\n".join(header) + "---\n" + yaml.dump(config_map, **dump) + "---\n" + yaml.dump(job, **dump)


class _BlockDumper(yaml.SafeDumper):
    """YAML as a person reads it: a text of several lines (the pods' script) as a literal block, and every value
    written out where it is (no anchors and aliases for the ones the replicas share)."""

    def ignore_aliases(self, data) -> bool:
        return True


_BlockDumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def _check_secret(run: Run, secret: str | None) -> None:
    if run.target != "cluster" or not run.secret_digest:
        raise IngestRefusal(403, "authorization", f"run {run.pk} runs on the runs worker; it takes no reports")
    if not secret or not hmac.compare_digest(_digest(secret), run.secret_digest):
        raise IngestRefusal(403, "authorization", f"not the secret of run {run.pk}")
    if run.is_finished:
        raise IngestRefusal(403, "authorization", f"run {run.pk} has {run.status}; its secret has expired")


def _number(event: dict, key: str, where: str) -> float:
    value = event.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise IngestRefusal(400, f"{where}.{key}", f"must be a finite number, got {value!r}")
    return value


def _whole(event: dict, key: str, where: str) -> int:
    value = event.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise IngestRefusal(400, f"{where}.{key}", f"must be a whole number >= 0, got {value!r}")
    return value


def _checked_rank(event: dict, where: str, world_size: int, coordinate_of: Callable[[int], dict]) -> int:
    """The event's rank, checked against the plan's: its ``device`` must be that rank's pipeline rank, and its
    ``coordinate`` (where the event has one) that rank's place in Megatron's order. Returns the pipeline rank."""
    rank = event.get("rank")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise IngestRefusal(400, f"{where}.rank", f"must be a rank of this run (0 to {world_size - 1}), got {rank!r}")
    coordinate = coordinate_of(rank)
    device = event.get("device")
    if isinstance(device, bool) or device != coordinate["pp"]:
        raise IngestRefusal(400, f"{where}.device", f"rank {rank} runs device {coordinate['pp']}, got {device!r}")
    if "coordinate" in event and event["coordinate"] != coordinate:
        raise IngestRefusal(400, f"{where}.coordinate", f"rank {rank} is {coordinate} in this run's plan, "
                                                        f"got {event['coordinate']!r}")
    return device


def _checked_span(event: dict, where: str) -> None:
    start, end = _number(event, "start_ms", where), _number(event, "end_ms", where)
    if end < start:
        raise IngestRefusal(400, f"{where}.end_ms", f"ends before it starts ({end} < {start})")


def _checked_action(event: dict, where: str, actions_of: list[set[str]], world_size: int,
                    coordinate_of: Callable[[int], dict]) -> dict:
    device = _checked_rank(event, where, world_size, coordinate_of)
    if not isinstance(event.get("action"), str) or event["action"] not in actions_of[device]:
        raise IngestRefusal(400, f"{where}.action", f"{event.get('action')!r} is not an action of device {device} "
                                                    f"in this run's plan")
    _whole(event, "step", where)
    # The action's name says its stage, kind and micro-batch: the event must say the same.
    action = parse_action(event["action"])
    for key, expected in (("stage", action.stage), ("kind", str(action.type)), ("microbatch", action.microbatch)):
        if event.get(key) != expected or isinstance(event.get(key), bool):
            raise IngestRefusal(400, f"{where}.{key}",
                                f"action {action} has {key} {expected!r}, got {event.get(key)!r}")
    _checked_span(event, where)
    return event


def _checked_collective(event: dict, where: str, degrees: dict[str, int], world_size: int,
                        coordinate_of: Callable[[int], dict]) -> dict:
    """A collective of a hybrid run's rank: its op named group first (``tp_all_gather``), a group of the plan, its
    ``index`` (the rank's n-th collective of the step: rank, step and index identify it), bytes and times."""
    _checked_rank(event, where, world_size, coordinate_of)
    op = event.get("op")
    if not isinstance(op, str) or len(op) > COLLECTIVE_OP_LENGTH or not COLLECTIVE_OP.fullmatch(op):
        raise IngestRefusal(400, f"{where}.op", f"must name the collective, its group first (as tp_all_gather), in at "
                                                f"most {COLLECTIVE_OP_LENGTH} lowercase letters, digits and _, "
                                                f"got {op!r}")
    group = op.split("_", 1)[0]
    if event.get("group", group) != group:
        raise IngestRefusal(400, f"{where}.group", f"collective {op} is of group {group!r}, got {event['group']!r}")
    if degrees.get(group) == 1:
        raise IngestRefusal(400, f"{where}.op", f"this run's plan has no {group.upper()} group ({group.upper()}1), "
                                                f"got {op!r}")
    for key in ("step", "index", "bytes"):
        _whole(event, key, where)
    _checked_span(event, where)
    return event


def _checked_batch(run: Run, body) -> list[dict]:
    events = body.get("events") if isinstance(body, dict) else None
    unknown = sorted(set(body) - {"events"}) if isinstance(body, dict) else []
    if unknown:   # as api.fields.KnownFieldsMixin refuses them (the schema: IngestBatchInput)
        raise IngestRefusal(400, unknown[0], "is not a field of an event batch; its one field is events")
    if not isinstance(events, list) or not events:
        raise IngestRefusal(400, "events", "must be a non-empty list of events")
    if len(events) > HTTP_BATCH_EVENTS:
        raise IngestRefusal(400, "events", f"at most {HTTP_BATCH_EVENTS} events a batch, got {len(events)}")
    doc = run.plan.plan_doc
    actions_of = [set(device_actions) for device_actions in doc["actions"]]  # names, as stored
    # A plan without ``parallel`` is its pipeline alone: rank r is pipeline rank r, every other degree 1.
    config = load_parallel(doc.get("parallel") or {"pp": doc["num_devices"]})
    degrees = {degree: getattr(config, degree) for degree in ("tp", "cp", "pp", "dp", "ep")}
    checked = []
    for index, event in enumerate(events):
        where = f"events[{index}]"
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "action":
            checked.append(_checked_action(event, where, actions_of, run.world_size, config.coordinate))
        elif kind == "collective":
            checked.append(_checked_collective(event, where, degrees, run.world_size, config.coordinate))
        elif kind in LIFECYCLE:
            checked.append(event)
        else:
            raise IngestRefusal(400, f"{where}.type", f"must be action, collective or one of {', '.join(LIFECYCLE)}, "
                                                      f"got {kind!r}")
    return checked


def _lifecycle(run: Run, event: dict, now) -> dict:
    """The run row's changes an event of its lifecycle makes (none for one that no longer applies)."""
    kind = event["type"]
    if kind == "run_started" and run.status == JobStatus.QUEUED:
        facts = event.get("facts") if isinstance(event.get("facts"), dict) else {}
        return {"status": JobStatus.RUNNING, "started_at": now, "cluster_facts": facts}
    if kind == "run_finished":
        summary = event.get("summary") if isinstance(event.get("summary"), dict) else {}
        losses = event.get("losses") if isinstance(event.get("losses"), list) else []
        loss = event.get("loss")
        return {"status": JobStatus.SUCCEEDED, "finished_at": now, "summary": {**summary, "losses": losses},
                "loss": loss if isinstance(loss, (int, float)) and math.isfinite(loss) else None}
    if kind == "run_failed":
        return {"status": JobStatus.FAILED, "finished_at": now,
                "error": f"rank {event.get('rank')} failed: {str(event.get('error'))[:4000]}"}
    if kind == "run_cancelled":
        return {"status": JobStatus.CANCELLED, "finished_at": now, "error": "cancelled by its launcher"}
    return {}


def ingest(*, run_id: int, secret: str | None, body) -> dict:
    """Store a batch a cluster run's rank posted: ``{"stored": n, "duplicates": n, "status": ...}``. Raises
    ``IngestRefusal`` (nothing stored) for a wrong secret or a batch with an event the plan does not have."""
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("plan").filter(pk=run_id).first()
        if run is None:
            raise IngestRefusal(403, "authorization", f"not the secret of run {run_id}")
        _check_secret(run, secret)
        events = _checked_batch(run, body)
        now, changes = timezone.now(), {}
        for event in events:
            if event["type"] in LIFECYCLE:
                changes.update(_lifecycle(run, event, now))
        stored = RunEventStore(run.pk).store(events)   # under the run's lock: one writer of its sequence at a time
        if stored and run.status == JobStatus.QUEUED and "status" not in changes:
            changes.update(status=JobStatus.RUNNING, started_at=now)   # its run_started was lost or comes later
        Run.objects.filter(pk=run.pk).update(heartbeat_at=now, **changes)
    timed = sum(event["type"] in TIMED for event in events)
    return {"stored": stored, "duplicates": timed - stored, "status": str(changes.get("status", run.status))}
