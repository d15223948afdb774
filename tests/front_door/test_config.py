"""The role's configuration as written, without a running front door: the pairs it finds in an
inventory, what `haproxy -c` says of the production settings, what the configuration must and
must not hold, and the inputs the role refuses before it installs anything."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from tests.ansible_trust import evaluate, trusted
from tests.front_door.door import haproxy_binary, make_certificate
from tests.front_door.render import render, role_file, role_variables, write

PAIR_KEY = "pair-api-key-" + "p" * 20
INVENTORY: dict[str, Any] = {
    "groups": {
        "all": ["spark-01", "spark-02", "spark-11", "spark-12", "door"],
        "dualspark": ["spark-01", "spark-02", "spark-11", "spark-12"],
        "front_door": ["door"],
    },
    "hostvars": {
        "spark-01": {
            "ansible_host": "10.0.0.1",
            "spark_pair_rank": 0,
            "spark_pair_name": "pair_one",
            "vllm_tp2_service_api_key": PAIR_KEY,
        },
        "spark-02": {
            "ansible_host": "10.0.0.2",
            "spark_pair_rank": 1,
            "spark_pair_name": "pair_one",
        },
        "spark-12": {
            "ansible_host": "10.0.1.2",
            "spark_pair_rank": 0,
            "spark_pair_name": "pair_b",
            "front_door_backend_address": "192.168.7.12",
            "vllm_tp2_service_port": 8001,
            "vllm_tp2_service_api_key": PAIR_KEY + "b",
        },
        "spark-11": {"ansible_host": "10.0.1.1", "spark_pair_rank": 1, "spark_pair_name": "pair_b"},
        "door": {"ansible_host": "10.0.9.9"},
    },
    "inventory_hostname": "door",
    "ansible_host": "10.0.9.9",
}
CLIENTS = [{"name": "app", "key": "client-app-" + "a" * 20}, {"name": "ci", "key": "c" * 32}]


def production(tmp_path: Path, **more: Any) -> dict[str, Any]:
    """The role's defaults on the inventory above, with the files -c reads in `tmp_path`."""
    variables = role_variables(
        {**INVENTORY, "front_door_api_keys": CLIENTS, "ansible_managed": "Ansible managed"}
    )
    for name in ("front_door_pairs", "front_door_pair_api_keys", "front_door_tls_names"):
        variables[name] = evaluate(variables[name], variables)
    variables.update(
        front_door_tls_dir=str(tmp_path),
        front_door_certificate_path=str(tmp_path / "front_door.pem"),
        front_door_keys_map=str(tmp_path / "keys.map"),
        front_door_pair_keys_map=str(tmp_path / "pair_keys.map"),
        **more,
    )
    return variables


def test_the_pairs_are_the_rank0_hosts_of_the_inventory() -> None:
    variables = role_variables(INVENTORY)
    assert evaluate(variables["front_door_pairs"], variables) == [
        {"name": "pair_b", "address": "192.168.7.12", "port": 8001},
        {"name": "pair_one", "address": "10.0.0.1", "port": 8000},
    ]
    assert evaluate(variables["front_door_pair_api_keys"], variables) == {
        "pair_one": PAIR_KEY,
        "pair_b": PAIR_KEY + "b",
    }
    assert evaluate(variables["front_door_host"], variables) == "door"
    assert evaluate(variables["front_door_tls_names"], variables) == ["door", "10.0.9.9"]


def test_without_pairs_or_a_front_door_in_the_inventory() -> None:
    variables = role_variables({"groups": {"all": ["x"]}, "hostvars": {"x": {}}})
    assert evaluate(variables["front_door_pairs"], variables) == []
    assert evaluate(variables["front_door_host"], variables) == ""


def test_the_production_configuration_passes_haproxy_check(tmp_path: Path) -> None:
    variables = production(tmp_path)
    make_certificate(tmp_path, ["door"])
    write(tmp_path, "keys.map", render("front_door_keys.map.j2", variables))
    write(tmp_path, "pair_keys.map", render("front_door_pair_keys.map.j2", variables))
    config = write(tmp_path, "haproxy.cfg", render("haproxy.cfg.j2", variables))
    result = subprocess.run(
        [haproxy_binary(), "-c", "-f", str(config)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[ALERT]" not in result.stdout + result.stderr
    keys = (tmp_path / "keys.map").read_text().splitlines()
    assert [line for line in keys if not line.startswith("#")] == [
        f"{c['key']} {c['name']}" for c in CLIENTS
    ]
    pair_keys = (tmp_path / "pair_keys.map").read_text().splitlines()
    assert f"pair_b {PAIR_KEY}b" in pair_keys


def sections(config: str) -> dict[str, list[str]]:
    """Section header -> its lines, without comments."""
    found: dict[str, list[str]] = {}
    current = ""
    for line in config.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith(" "):
            current = line.strip()
            found[current] = []
        else:
            found[current].append(line.strip())
    return found


def test_each_pair_is_checked_with_its_key_and_tracked_by_the_pairs_backend(
    tmp_path: Path,
) -> None:
    config = sections(render("haproxy.cfg.j2", production(tmp_path)))
    pairs = config["backend pairs"]
    assert "balance hash var(txn.affinity)" in pairs
    assert "hash-type consistent" in pairs
    for name, address in (("pair_one", "10.0.0.1:8000"), ("pair_b", "192.168.7.12:8001")):
        (tracked,) = [line for line in pairs if line.startswith(f"server {name} ")]
        assert f"track pair-{name}/{name}" in tracked
        # Entering maintenance counts as marked down in HAProxy 2.6: this would cut a drain.
        assert "on-marked-down" not in tracked
        section = config[f"listen pair-{name}"]
        sends = [line for line in section if line.startswith("http-check send")]
        assert sends == [
            "http-check send meth GET uri /health",
            "http-check send meth GET uri /v1/models hdr Authorization "
            f'"Bearer %[str({name}),map({tmp_path}/pair_keys.map)]"',
        ]
        assert section.count("http-check connect") == 2
        (server,) = [line for line in section if line.startswith("server ")]
        assert server == (
            f"server {name} {address} check inter 2000ms fall 3 rise 2 "
            "on-marked-down shutdown-sessions"
        )
    defaults = config["defaults"]
    assert "timeout server 600s" in defaults
    assert "timeout check 2000ms" in defaults


def test_the_log_holds_neither_a_header_nor_the_body(tmp_path: Path) -> None:
    config = render("haproxy.cfg.j2", production(tmp_path))
    formats = re.findall(r"^\s*log-format (.*)$", config, flags=re.MULTILINE)
    assert formats
    for log_format in formats:
        for leak in ("hdr", "authorization", "body", "%hr", "%hs", "capture", "%[req"):
            assert leak not in log_format.lower()
    assert "capture" not in config
    assert "option httplog" not in config


def test_the_gate_binds_the_loopback_and_the_metrics_their_own_address(tmp_path: Path) -> None:
    config = sections(
        render("haproxy.cfg.j2", production(tmp_path, front_door_metrics_bind="10.0.9.9"))
    )
    assert config["frontend gate"][0] == "bind 127.0.0.1:8099"
    assert config["frontend metrics"][0] == "bind 10.0.9.9:8405"
    assert config["frontend public"][0].startswith("bind 0.0.0.0:8443 ssl crt ")


def refusal(variables: dict[str, Any]) -> str | None:
    """The fail_msg of the first assert of tasks/inputs.yml that fails, None if all pass."""
    for task in role_file("tasks/inputs.yml"):
        check = task["ansible.builtin.assert"]
        scope = trusted({**variables, **task.get("vars", {})})
        templar = Templar(loader=DataLoader(), variables=scope)
        that = check["that"] if isinstance(check["that"], list) else [check["that"]]
        if not all(templar.evaluate_conditional(trusted(condition)) for condition in that):
            return " ".join(str(templar.template(trusted(check["fail_msg"]))).split())
    return None


def good_inputs(tmp_path: Path, **changes: Any) -> dict[str, Any]:
    variables = production(tmp_path, front_door_tls_generate=True)
    variables.update(changes)
    return variables


def test_sound_inputs_pass(tmp_path: Path) -> None:
    assert refusal(good_inputs(tmp_path)) is None
    certificate, key = make_certificate(tmp_path, ["door"])
    operator = good_inputs(
        tmp_path,
        front_door_tls_generate=False,
        front_door_tls_certificate=str(certificate),
        front_door_tls_private_key=str(key),
    )
    assert refusal(operator) is None


SHORT = "s" * 19


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"front_door_api_keys": []}, "front_door_api_keys is empty"),
        (
            {"front_door_api_keys": [*CLIENTS, {"name": "app", "key": "d" * 30}]},
            "front_door_api_keys: names given twice: app.",
        ),
        (
            {"front_door_api_keys": [{"name": "a b", "key": "d" * 30}]},
            "names not of 1-64 of A-Za-z0-9_.- (they go in the access log): a b.",
        ),
        (
            {"front_door_api_keys": [*CLIENTS, {"name": "short", "key": SHORT}]},
            "the keys of short are shorter than 20 characters",
        ),
        (
            {"front_door_api_keys": [{"name": "spaced", "key": "has a space in it, 30 chars"}]},
            "the keys of spaced are shorter than 20 characters or hold characters",
        ),
        (
            {"front_door_api_keys": [*CLIENTS, {"name": "copy", "key": CLIENTS[0]["key"]}]},
            "one key is given to app, copy: each client needs a key of its own.",
        ),
        ({"front_door_pairs": []}, "No pair for the front door"),
        (
            {"front_door_pairs": [{"name": "p q", "address": "a", "port": 1}]},
            'front_door_pairs: "p q" is not a name of A-Za-z0-9_.-',
        ),
        (
            {"front_door_pairs": [{"name": "p", "address": "", "port": 1}]},
            "front_door_pairs: p has no address",
        ),
        (
            {"front_door_pair_api_keys": {"pair_one": PAIR_KEY}},
            "No usable vLLM API key for pair_b: set vllm_tp2_service_api_key",
        ),
        (
            {"front_door_tls_generate": False, "front_door_tls_certificate": "/nowhere.pem"},
            "front_door_tls_private_key (PEM files on the controller; the key may be ansible-vault "
            "encrypted), or front_door_tls_generate: true for a self-signed one. "
            'Not files: "/nowhere.pem", ""',
        ),
        (
            {"front_door_gate_port": 8443},
            "front_door_port, front_door_gate_port and front_door_metrics_port must differ",
        ),
        ({"front_door_affinity_header": "X Session"}, "must be an HTTP header name"),
    ],
    ids=[
        "no-keys",
        "same-name",
        "bad-name",
        "short-key",
        "key-with-spaces",
        "shared-key",
        "no-pairs",
        "bad-pair-name",
        "no-address",
        "no-pair-key",
        "no-certificate",
        "same-port",
        "bad-header",
    ],
)
def test_unsound_inputs_are_refused_with_a_message_that_shows_no_key(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    said = refusal(good_inputs(tmp_path, **changes))
    assert said is not None
    assert message in said
    for secret in [SHORT, PAIR_KEY, "d" * 30, *(c["key"] for c in CLIENTS)]:
        assert secret not in said


def test_a_missing_haproxy_fails_the_tests_and_says_what_installs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shutil, "which", lambda *args, **kwargs: None)
    with pytest.raises(
        pytest.fail.Exception, match="bin/setup installs the Debian package haproxy"
    ):
        haproxy_binary()
