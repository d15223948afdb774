"""The overlay role's defaults are the package's own: the DUALPATH_* settings the role writes into
the service's env file, from roles/dualpath_overlay/defaults/main.yml, read back through the
package's settings (files/vllm_dualpath/src/vllm_dualpath/settings.py) as the settings the package
has when none is set."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.ansible_trust import evaluate
from tests.helpers import REPO

ROLE = REPO / "roles/dualpath_overlay"
SETTINGS = REPO / "files/vllm_dualpath/src/vllm_dualpath/settings.py"


@pytest.fixture(scope="module")
def settings() -> ModuleType:
    """The package's settings module alone (standard library only, so no torch is loaded)."""
    spec = importlib.util.spec_from_file_location("overlay_settings", SETTINGS)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while it is made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def published_env(gpu: bool) -> dict[str, str]:
    """The env facts.yml publishes for the service from the role's defaults, on a node with no
    release yet, with or without a GPU."""
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text(encoding="utf-8"))
    tasks = yaml.safe_load((ROLE / "tasks/facts.yml").read_text(encoding="utf-8"))
    (task,) = [t for t in tasks if "dualpath_overlay_env" in t.get("ansible.builtin.set_fact", {})]
    links = {"results": [{"stat": {"exists": False}}, {"stat": {"exists": False}}]}
    variables: dict[str, Any] = {
        **defaults,
        **task["vars"],
        "dualpath_overlay_links": links,
        "dualpath_overlay_gpu_seen": {"stat": {"exists": gpu}},
        "dualpath_overlay_env_release": "0.1.0-abc",
    }
    env = evaluate(task["ansible.builtin.set_fact"]["dualpath_overlay_env"], variables)
    assert isinstance(env, dict)
    return {str(key): str(value) for key, value in env.items()}


@pytest.fixture(scope="module")
def role_env() -> dict[str, str]:
    return published_env(gpu=False)


def test_a_node_with_a_gpu_names_its_release_table_by_default(settings: ModuleType) -> None:
    env = published_env(gpu=True)
    assert env["DUALPATH_CALIBRATION_TABLE"] == "/opt/vllm_dualpath-calibration/0.1.0-abc.json"
    assert settings.load(env).calibration_table is not None


def test_the_role_writes_every_setting_it_has_a_default_for(role_env: dict[str, str]) -> None:
    written = {key for key in role_env if key.startswith("DUALPATH_")}
    assert written == {
        "DUALPATH_RELEASE",
        "DUALPATH_ENABLED",
        "DUALPATH_SMALL_M_MAX",
        "DUALPATH_LARGE_M_MIN",
        "DUALPATH_STRICT",
        "DUALPATH_CHANNEL_SCALE",
        "DUALPATH_UNPACK_AHEAD",
        "DUALPATH_UNPACK_AHEAD_MIN_M",
        "DUALPATH_UNPACK_AHEAD_DEPTH",
    }


def test_the_role_defaults_read_back_as_the_package_defaults(
    settings: ModuleType, role_env: dict[str, str]
) -> None:
    assert settings.load(role_env) == settings.Settings()


@pytest.mark.parametrize(
    ("variable", "default"),
    [
        ("SMALL_M_MAX", "DEFAULT_SMALL_M_MAX"),
        ("LARGE_M_MIN", "DEFAULT_LARGE_M_MIN"),
        ("UNPACK_AHEAD_MIN_M", "DEFAULT_UNPACK_AHEAD_MIN_M"),
        ("UNPACK_AHEAD_DEPTH", "DEFAULT_UNPACK_AHEAD_DEPTH"),
    ],
)
def test_each_threshold_is_the_package_default(
    settings: ModuleType, role_env: dict[str, str], variable: str, default: str
) -> None:
    assert role_env[getattr(settings, variable)] == str(getattr(settings, default))
