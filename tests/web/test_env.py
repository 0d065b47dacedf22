"""The typed environment readers fail loudly, naming the variable and the bad value."""

import os
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
