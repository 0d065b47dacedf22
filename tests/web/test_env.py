"""The typed environment readers fail loudly, naming the variable and the bad value."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from adaptis_web.env import env_bool, env_int, env_list, env_str


def test_env_str_returns_the_value_or_the_default(monkeypatch):
    monkeypatch.setenv("ADAPTIS_TEST_STR", "  value ")
    assert env_str("ADAPTIS_TEST_STR") == "value"
    monkeypatch.delenv("ADAPTIS_TEST_STR")
    assert env_str("ADAPTIS_TEST_STR", "fallback") == "fallback"


def test_env_str_without_default_requires_the_variable(monkeypatch):
    monkeypatch.setenv("ADAPTIS_TEST_STR", "   ")
    with pytest.raises(ImproperlyConfigured, match="ADAPTIS_TEST_STR is required"):
        env_str("ADAPTIS_TEST_STR")


@pytest.mark.parametrize("word, expected", [("1", True), ("TRUE", True), ("yes", True), ("on", True),
                                            ("0", False), ("false", False), ("No", False), ("off", False)])
def test_env_bool_reads_the_usual_words(monkeypatch, word, expected):
    monkeypatch.setenv("ADAPTIS_TEST_BOOL", word)
    assert env_bool("ADAPTIS_TEST_BOOL", not expected) is expected


def test_env_bool_rejects_anything_else(monkeypatch):
    monkeypatch.setenv("ADAPTIS_TEST_BOOL", "ture")
    with pytest.raises(ImproperlyConfigured, match="ADAPTIS_TEST_BOOL.*'ture'"):
        env_bool("ADAPTIS_TEST_BOOL", False)


def test_env_int_parses_and_checks_the_minimum(monkeypatch):
    monkeypatch.setenv("ADAPTIS_TEST_INT", "42")
    assert env_int("ADAPTIS_TEST_INT", 1, minimum=1) == 42
    monkeypatch.setenv("ADAPTIS_TEST_INT", "0")
    with pytest.raises(ImproperlyConfigured, match="ADAPTIS_TEST_INT must be >= 1; got 0"):
        env_int("ADAPTIS_TEST_INT", 1, minimum=1)
    monkeypatch.setenv("ADAPTIS_TEST_INT", "4x")
    with pytest.raises(ImproperlyConfigured, match="ADAPTIS_TEST_INT must be an integer; got '4x'"):
        env_int("ADAPTIS_TEST_INT", 1)


def test_env_list_splits_on_commas_and_rejects_empty_items(monkeypatch):
    monkeypatch.setenv("ADAPTIS_TEST_LIST", "a.example, b.example")
    assert env_list("ADAPTIS_TEST_LIST", []) == ["a.example", "b.example"]
    monkeypatch.setenv("ADAPTIS_TEST_LIST", "a.example,,b.example")
    with pytest.raises(ImproperlyConfigured, match="ADAPTIS_TEST_LIST has an empty item"):
        env_list("ADAPTIS_TEST_LIST", [])
    monkeypatch.delenv("ADAPTIS_TEST_LIST")
    assert env_list("ADAPTIS_TEST_LIST", ["x"]) == ["x"]


def test_settings_refuse_production_without_a_secret_key():
    """DEBUG=false makes SECRET_KEY mandatory: the settings module must not import without it."""
    env = {key: value for key, value in os.environ.items() if key != "SECRET_KEY"}
    env.update(DEBUG="false", ALLOWED_HOSTS="studio.example")
    result = subprocess.run([sys.executable, "-c", "import adaptis_web.settings"], env=env, capture_output=True,
                            text=True, cwd=Path(__file__).resolve().parents[2])
    assert result.returncode != 0
    assert "environment variable SECRET_KEY is required" in result.stderr


def _deploy_check(**env: str) -> subprocess.CompletedProcess:
    base = {key: value for key, value in os.environ.items()
            if not key.startswith("SECURE_") and key not in ("DEBUG", "TRUST_X_FORWARDED_PROTO")}
    base.update(DEBUG="false", SECRET_KEY="k" * 20 + "-production-secret-of-fifty-chars!", ALLOWED_HOSTS="studio.example",
                **env)
    return subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], env=base,
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])


def test_production_defaults_pass_django_s_deployment_checks():
    """DEBUG off: secure cookies, HTTPS redirect and HSTS by default. What `check --deploy` still names is only the
    domain owner's choice (HSTS for every subdomain, the preload list); with both chosen it finds nothing."""
    result = _deploy_check()
    findings = set(re.findall(r"security\.W\d+", result.stdout + result.stderr))
    assert findings == {"security.W005", "security.W021"}, result.stdout + result.stderr
    result = _deploy_check(SECURE_HSTS_INCLUDE_SUBDOMAINS="true", SECURE_HSTS_PRELOAD="true")
    assert result.returncode == 0 and "no issues" in result.stdout, result.stdout + result.stderr


def test_each_https_default_can_be_turned_off_by_name_and_the_deploy_check_then_says_so():
    result = _deploy_check(SECURE_COOKIES="false", SECURE_SSL_REDIRECT="false", SECURE_HSTS_SECONDS="0")
    assert result.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in result.stdout + result.stderr, check


def test_production_redirects_plain_http_but_not_the_health_check(client, settings):
    settings.SECURE_SSL_REDIRECT = True
    response = client.get("/api/presets/")
    assert response.status_code == 301 and response["Location"].startswith("https://")
    assert client.get("/healthz").status_code in (200, 503)


@pytest.mark.parametrize("setting, expected", [(None, {"server_side_binding": True, "prepare_threshold": 5}),
                                               ("false", {})])
def test_postgresql_prepares_repeated_queries_unless_told_not_to(setting, expected):
    """DB_PREPARED_STATEMENTS (default on): PostgreSQL plans the API's queries once per connection; off behind a
    transaction-mode pooler."""
    env = {key: value for key, value in os.environ.items() if key != "DB_PREPARED_STATEMENTS"}
    env["DATABASE_URL"] = "postgres://postgres@127.0.0.1:5432/adaptis"
    if setting is not None:
        env["DB_PREPARED_STATEMENTS"] = setting
    code = "import json, adaptis_web.settings as s; print(json.dumps(s.DATABASES['default'].get('OPTIONS', {})))"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == expected
