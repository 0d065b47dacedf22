"""Services: spec parsing and storage, planning-job checks and the planning work, run creation rules.

The planning work (``job_run``) runs in-process here; ``test_worker.py`` runs it through a real worker.
"""

import json
from dataclasses import replace

import pytest
import yaml

from adaptis_web.studio.catalog.specs import spec_create, spec_parse_upload
from adaptis_web.studio.models import JobStatus, ModelSpecRecord, Plan, PlanningJob, Run
from adaptis_web.studio.planning.jobs import job_request_check, job_run, spec_create_with_job
from adaptis_web.studio.planning.predictions import plan_prediction
from adaptis_web.studio.runs.local_runs import cpu_run_refusal, run_create
from planner.baselines import build_baseline
from planner.cluster import load_cluster_preset
from planner.cost import analytic_profile
from planner.errors import SpecError
from planner.limits import MAX_MICROBATCHES
from planner.simulator import simulate
from planner.spec.presets import load_model_preset

TINY = load_model_preset("tiny-llama")


def _request(**overrides):
    values = dict(spec=TINY, num_devices=2, num_microbatches=4, cluster_preset="cpu-host")
    values.update(overrides)
    return job_request_check(**values)


class TestSpecParseUpload:
    def test_reads_our_json_format(self, spec_text):
        assert spec_parse_upload(content=spec_text().encode(), filename="tiny.json") == (TINY, [])

    def test_reads_our_yaml_format(self):
        text = yaml.safe_dump(TINY.to_dict())
        assert spec_parse_upload(content=text.encode(), filename="tiny.yaml") == (TINY, [])

    def test_reads_a_huggingface_config(self):
        config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
                  "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "num_hidden_layers": 3, "vocab_size": 300, "max_position_embeddings": 64}
        spec, warnings = spec_parse_upload(content=json.dumps(config).encode(), filename="config.json")
        assert warnings == []
        assert [layer.kind for layer in spec.layers] == ["embedding", "decoder", "decoder", "decoder", "head"]
        assert spec.hidden_size == 64 and spec.vocab_size == 300

    def test_names_the_nested_field_under_file(self, spec_text):
        doc = json.loads(spec_text())
        doc["layers"][1]["mixer"]["num_heads"] = 0
        with pytest.raises(SpecError) as caught:
            spec_parse_upload(content=json.dumps(doc).encode(), filename="bad.json")
        assert caught.value.field == "file.layers[1].mixer.num_heads"
        assert caught.value.reason == "must be >= 1, got 0"

    def test_a_broken_file_is_an_error_of_the_file_itself(self):
        with pytest.raises(SpecError) as caught:
            spec_parse_upload(content=b'{"format": "adaptis.model/v1",', filename="bad.json")
        assert caught.value.field == "file"
        assert "invalid JSON at line 1" in caught.value.reason

    def test_rejects_non_utf8_bytes(self):
        with pytest.raises(SpecError, match="file: is not UTF-8 text"):
            spec_parse_upload(content=b"\xff\xfe\x00", filename="spec.json")

    def test_inline_documents_are_rooted_at_their_own_field(self):
        with pytest.raises(SpecError) as caught:
            spec_parse_upload(content=b'{"format": "adaptis.model/v1"}', filename="doc.json", field="doc")
        assert caught.value.field.startswith("doc.")


class TestSpecCreate:
    def test_stores_the_canonical_document(self, people):
        record = spec_create(team=people.team, owner=people.member, spec=TINY, source_filename="tiny.json")
        assert record.doc == TINY.to_dict()
        assert record.num_layers == TINY.num_layers
        assert record.name == "tiny-llama"

    def test_the_same_preset_uploaded_twice_is_one_spec(self, people):
        first = spec_create(team=people.team, owner=people.member, spec=TINY, source_filename="tiny.json")
        again = spec_create(team=people.team, owner=people.owner, spec=TINY, source_filename="tiny-again.json")
        assert again.pk == first.pk and ModelSpecRecord.objects.count() == 1
        longer = spec_create(team=people.team, owner=people.member, spec=replace(TINY, seq_len=TINY.seq_len * 2))
        assert longer.pk != first.pk and ModelSpecRecord.objects.count() == 2

    def test_an_uploaded_hf_config_is_named_after_the_model(self, people):
        config = {"_name_or_path": "Qwen/Qwen3-30B-A3B", "model_type": "qwen3_moe", "hidden_size": 64,
                  "intermediate_size": 96, "moe_intermediate_size": 32, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2, "num_experts": 4,
                  "num_experts_per_tok": 2, "vocab_size": 300}
        spec, _ = spec_parse_upload(content=json.dumps(config).encode(), filename="config.json")
        record = spec_create(team=people.team, owner=people.member, spec=spec, source_filename="config.json")
        assert record.name == "Qwen3-30B-A3B"
        del config["_name_or_path"]
        spec, _ = spec_parse_upload(content=json.dumps(config).encode(), filename="my-moe.json")
        assert spec_create(team=people.team, owner=people.member, spec=spec).name == "my-moe"

    def test_refuses_a_team_the_user_is_not_in(self, people):
        with pytest.raises(SpecError) as caught:
            spec_create(team=people.team, owner=people.outsider, spec=TINY)
        assert caught.value.field == "team"
        assert ModelSpecRecord.objects.count() == 0


class TestJobRequestCheck:
    def test_resolves_a_preset_cluster(self):
        request = _request()
        assert request.cluster == load_cluster_preset("cpu-host")
        assert request.cluster_preset == "cpu-host"

    def test_accepts_a_custom_cluster_document(self):
        doc = load_cluster_preset("h100-sxm-1x8").to_dict()
        request = _request(cluster_preset="", cluster_doc=doc)
        assert request.cluster_preset == "" and request.cluster.num_devices == 8

    def test_names_the_bad_field_of_a_custom_cluster(self):
        doc = load_cluster_preset("h100-sxm-1x8").to_dict()
        doc["device"]["efficiency"] = 1.5
        with pytest.raises(SpecError) as caught:
            _request(cluster_preset="", cluster_doc=doc)
        assert caught.value.field == "cluster.device.efficiency"

    @pytest.mark.parametrize("overrides, field, reason", [
        ({"num_devices": 5}, "num_devices", "between 1 and the cluster's 4 devices"),
        ({"num_devices": 0}, "num_devices", "between 1 and the cluster's 4 devices"),
        ({"cluster_preset": "h100-sxm-1x8", "num_devices": 7}, "num_devices", "has only 6 layers"),
        ({"num_microbatches": 0}, "num_microbatches", f"between 1 and {MAX_MICROBATCHES}"),
        ({"schedule": "2f2b"}, "schedule", "must be one of"),
        ({"cluster_preset": "tpu-pod"}, "cluster_preset", "unknown preset 'tpu-pod'"),
        ({"cluster_preset": ""}, "cluster_preset", "is required"),
    ])
    def test_rejects_with_field_and_reason(self, overrides, field, reason):
        with pytest.raises(SpecError) as caught:
            _request(**overrides)
        assert caught.value.field == field
        assert reason in caught.value.reason

    def test_rejects_both_a_preset_and_a_custom_cluster(self):
        with pytest.raises(SpecError, match="either a cluster preset or a custom cluster"):
            _request(cluster_doc=load_cluster_preset("cpu-host").to_dict())


class TestSpecCreateWithJob:
    def test_creates_spec_and_queued_job_and_enqueues_on_commit(self, people, django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            job = spec_create_with_job(team=people.team, user=people.owner, spec=TINY, source_filename="t.json",
                                       request=_request())
        assert job.status == JobStatus.QUEUED and job.spec.source_filename == "t.json"
        assert job.cluster_doc == load_cluster_preset("cpu-host").to_dict()
        # on cpu-host: the planning task and the profile it waits for, measured on the runs' host (runs.profiling)
        assert len(callbacks) == 2, "the planning task and the profile's are each sent once, after commit"
        assert job.celery_task_id and job.measured_profile.status == JobStatus.QUEUED

    def test_stores_nothing_when_the_user_is_not_in_the_team(self, people):
        with pytest.raises(SpecError):
            spec_create_with_job(team=people.team, user=people.outsider, spec=TINY, source_filename="t.json",
                                 request=_request())
        assert ModelSpecRecord.objects.count() == 0 and PlanningJob.objects.count() == 0

    def test_a_broker_failure_marks_the_job_failed(self, people, monkeypatch, django_capture_on_commit_callbacks):
        from adaptis_web.celery import app

        def refuse(*args, **kwargs):
            raise ConnectionError("Error 111 connecting to redis")

        monkeypatch.setattr(app, "send_task", refuse)  # the broker refuses whatever is sent (work.queueing)
        with django_capture_on_commit_callbacks(execute=True):
            job = spec_create_with_job(team=people.team, user=people.owner, spec=TINY, source_filename="t.json",
                                       request=_request())
        job.refresh_from_db()
        assert job.status == JobStatus.FAILED
        assert "could not enqueue the task: Error 111" in job.error


def _stored_job(people, **overrides) -> PlanningJob:
    record = spec_create(team=people.team, owner=people.owner, spec=TINY)
    request = _request(**overrides)
    values = dict(spec=record, created_by=people.owner, cluster_preset=request.cluster_preset,
                  cluster_doc=request.cluster.to_dict(), num_devices=request.num_devices,
                  num_microbatches=request.num_microbatches, schedule=request.schedule, partition=request.partition)
    return PlanningJob.objects.create(**values)


class TestJobRun:
    def test_stores_the_plan_and_its_simulation(self, people):
        job = _stored_job(people)
        plan = job_run(job_id=job.pk)
        job.refresh_from_db()
        assert job.status == JobStatus.SUCCEEDED and job.progress == 1.0 and job.finished_at is not None
        # Independent computation: the same planner calls made here give the same plan and timings.
        cluster = load_cluster_preset("cpu-host")
        profile = analytic_profile(TINY, cluster)
        expected_plan = build_baseline("1f1b", profile, 2, 4, cluster=cluster)
        expected = simulate(expected_plan, profile, cluster).to_dict()
        assert plan.plan_doc["actions"] == expected_plan.to_dict()["actions"]
        assert plan.iteration_ms == pytest.approx(expected["iteration_ms"])
        assert plan.bubble_ratio == pytest.approx(expected["bubble_ratio"])
        assert "timeline" not in plan.simulation and "transfers" not in plan.simulation, "simulated on demand"
        assert plan.simulation["per_device"] == expected["per_device"]
        assert plan_prediction(plan)["timeline"] == expected["timeline"]
        assert plan_prediction(plan)["transfers"] == expected["transfers"]
        assert plan.profile_doc == profile.to_dict()
        assert plan.layout == "E,t*2|t*2,L"
        assert len(plan_prediction(plan)["timeline"]) == 2 * 2 * 4  # F and B per stage and micro-batch

    def test_records_a_planning_error_on_the_job(self, people):
        job = _stored_job(people)
        PlanningJob.objects.filter(pk=job.pk).update(schedule="no-such-schedule")
        assert job_run(job_id=job.pk) is None
        job.refresh_from_db()
        assert job.status == JobStatus.FAILED
        assert "schedule" in job.error
        assert Plan.objects.count() == 0

    def test_an_unforeseen_failure_says_where_its_traceback_is_not_its_text(self, people, monkeypatch, caplog):
        from adaptis_web.studio.planning import jobs

        def broken(job):
            raise KeyError("layers.7.mixer internals")

        monkeypatch.setattr(jobs, "_plan_job", broken)
        job = _stored_job(people)
        assert job_run(job_id=job.pk) is None
        job.refresh_from_db()
        assert job.status == JobStatus.FAILED
        assert "KeyError" not in job.error and "internals" not in job.error
        assert f'var/planner.log under make run) after the line "planning job {job.pk} failed"' in job.error
        logged = [record for record in caplog.records if record.getMessage() == f"planning job {job.pk} failed"]
        assert len(logged) == 1 and logged[0].exc_info[0] is KeyError, "the traceback went to the log"

    def test_skips_a_job_that_is_not_queued(self, people):
        job = _stored_job(people)
        PlanningJob.objects.filter(pk=job.pk).update(status=JobStatus.SUCCEEDED)
        assert job_run(job_id=job.pk) is None
        assert Plan.objects.count() == 0


class TestRunCreate:
    @pytest.fixture
    def plan(self, people):
        job = _stored_job(people)
        return job_run(job_id=job.pk)

    def test_creates_a_queued_run_for_all_devices_of_the_plan(self, people, plan, django_capture_on_commit_callbacks):
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            run = run_create(plan=plan, user=people.member, steps=3)
        assert (run.status, run.world_size, run.steps, run.backend) == (JobStatus.QUEUED, 2, 3, "gloo")
        assert len(callbacks) == 1

    def test_refuses_an_outsider(self, people, plan):
        with pytest.raises(SpecError, match="team"):
            run_create(plan=plan, user=people.outsider)
        assert Run.objects.count() == 0

    def test_refuses_more_ranks_than_allowed(self, people, plan, settings):
        settings.CPU_RUN_MAX_RANKS = 1
        with pytest.raises(SpecError) as caught:
            run_create(plan=plan, user=people.owner)
        assert caught.value.field == "plan" and "at most 1 ranks" in caught.value.reason

    def test_refuses_a_step_count_out_of_range(self, people, plan):
        with pytest.raises(SpecError) as caught:
            run_create(plan=plan, user=people.owner, steps=0)
        assert caught.value.field == "steps"

    def test_refuses_a_realistic_model_unless_scaled_down(self, people, plan):
        llama = load_model_preset("llama-3-8b")
        plan.job.spec.doc = llama.to_dict()
        plan.job.spec.save()
        with pytest.raises(SpecError) as caught:
            run_create(plan=plan, user=people.owner)
        assert caught.value.field == "scale_down"
        assert "8,030M parameters" in caught.value.reason
        run = run_create(plan=plan, user=people.owner, scale_down=True)
        assert run.scaled_down


def test_cpu_run_refusal_lets_tiny_models_through_and_stops_big_ones(settings):
    assert cpu_run_refusal(load_model_preset("tiny-hybrid")) is None
    settings.CPU_RUN_MAX_PARAMS = 1000
    assert "tiny-hybrid" in cpu_run_refusal(load_model_preset("tiny-hybrid"))


@pytest.mark.parametrize("schedule", ["interleaved-1f1b", "zb-v"])
def test_two_chunk_schedules_need_two_stages_per_device(schedule):
    """tiny-llama has 6 layers: 3 devices x 2 chunks fit, 4 devices x 2 chunks do not."""
    assert _request(schedule=schedule, num_devices=3).num_devices == 3
    with pytest.raises(SpecError, match="needs 8 stages"):
        _request(schedule=schedule, num_devices=4)


def test_an_unknown_partition_is_refused():
    with pytest.raises(SpecError) as caught:
        _request(partition="random")
    assert caught.value.field == "partition"


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-v"])
def test_every_accepted_schedule_plans(people, schedule):
    """What the request check lets through, the planner can build: no job fails after being accepted."""
    job = _stored_job(people, schedule=schedule, num_devices=3, num_microbatches=6, partition="time-balanced")
    plan = job_run(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == JobStatus.SUCCEEDED, job.error
    assert plan.strategy == schedule and plan.plan_doc["num_devices"] == 3
