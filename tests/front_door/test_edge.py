"""The client-facing listener of the real HAProxy with the role's configuration: keys, limits,
the access log, TLS, metrics, and nothing that names a pair's address."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys

import pytest

from tests.front_door.door import (
    CLIENT_KEYS,
    CTL,
    MAX_REQUEST_BYTES,
    PAIR_KEYS,
    RATE_LIMIT,
    RATE_PERIOD_S,
    Answer,
    FrontDoorUnderTest,
    wait_until,
)


def assert_openai_error(answer: Answer, status: int) -> dict[str, object]:
    assert answer.status == status, answer
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()["error"]
    assert error["code"] == status
    assert error["message"]
    assert error["type"]
    return error


def seen_count(door: FrontDoorUnderTest) -> int:
    return sum(len(double.completions()) for double in door.pairs.values())


def test_a_good_key_reaches_a_pair_with_the_pairs_own_key(door: FrontDoorUnderTest) -> None:
    before = {name: len(double.completions()) for name, double in door.pairs.items()}
    answer = door.complete(prompt="hello")
    assert answer.status == 200
    pair = answer.json()["pair"]
    seen = door.pairs[pair].completions()
    assert len(seen) == before[pair] + 1
    assert seen[-1].authorization == f"Bearer {PAIR_KEYS[pair]}"
    assert seen[-1].body["prompt"] == "hello"
    assert seen[-1].headers["x-forwarded-proto"] == "https"
    assert CLIENT_KEYS["alice"] not in json.dumps(seen[-1].headers)


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong-key-" + "x" * 20,
        f"Basic {CLIENT_KEYS['alice']}",
        f"Bearer {PAIR_KEYS['pair_one']}",  # a pair's key is no client's key
        f"Bearer {CLIENT_KEYS['alice']}x",
    ],
    ids=["missing", "unknown", "not-bearer", "a-pairs-key", "longer"],
)
def test_a_missing_or_wrong_key_gets_401_json_and_reaches_no_pair(
    door: FrontDoorUnderTest, authorization: str | None
) -> None:
    before = seen_count(door)
    headers = {"Authorization": authorization} if authorization else {}
    answer = door.request(body={"model": "m", "prompt": "hi"}, key=None, headers=headers)
    assert_openai_error(answer, 401)
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert seen_count(door) == before


def test_the_bearer_scheme_is_case_insensitive(door: FrontDoorUnderTest) -> None:
    headers = {"Authorization": f"bearer {CLIENT_KEYS['alice']}"}
    assert door.request(body={"prompt": "hi"}, key=None, headers=headers).status == 200


def test_the_access_log_names_the_key_and_never_holds_a_key(door: FrontDoorUnderTest) -> None:
    answer = door.complete(key=CLIENT_KEYS["erin"], prompt="logged")
    assert answer.status == 200
    door.request(body={"prompt": "hi"}, key="refused-key-" + "r" * 20)
    pair = answer.json()["pair"]
    line = door.log.wait_for(lambda line: "key=erin " in line)
    assert f"pair={pair} status=200 " in line
    assert '"POST /v1/completions HTTP/1.1"' in line
    assert "bytes_in=" in line
    assert "bytes_out=" in line
    assert "time_ms=" in line
    refused = door.log.wait_for(lambda line: "status=401" in line)
    assert "key=- pair=<NOSRV>" in refused
    everything = "\n".join(door.log.lines()) + (door.directory / "haproxy.out").read_text()
    for secret in [*CLIENT_KEYS.values(), *PAIR_KEYS.values(), "refused-key-"]:
        assert secret not in everything
    assert "logged" not in everything  # no body


def test_a_body_over_the_limit_gets_413_json_before_it_is_sent(door: FrontDoorUnderTest) -> None:
    before = seen_count(door)
    fits = json.dumps({"prompt": "x" * (MAX_REQUEST_BYTES - 14)}).encode()
    assert len(fits) == MAX_REQUEST_BYTES
    assert door.request(body=fits).status == 200
    error = assert_openai_error(door.declared(MAX_REQUEST_BYTES + 1), 413)
    assert str(MAX_REQUEST_BYTES) in str(error["message"])
    assert seen_count(door) == before + 1


def test_a_body_of_unknown_length_gets_411(door: FrontDoorUnderTest) -> None:
    """Chunked: its size is known only once it has arrived, so the limit could not hold."""
    before = seen_count(door)
    assert_openai_error(door.declared(None, b"5\r\nhello\r\n"), 411)
    assert seen_count(door) == before


def test_past_the_rate_limit_a_key_gets_429_json_with_retry_after(
    door: FrontDoorUnderTest,
) -> None:
    statuses = [door.complete(key=CLIENT_KEYS["carol"]).status for _ in range(RATE_LIMIT)]
    assert statuses == [200] * RATE_LIMIT
    answer = door.complete(key=CLIENT_KEYS["carol"])
    assert_openai_error(answer, 429)
    assert answer.headers["retry-after"] == str(RATE_PERIOD_S)
    # Another key is not limited by carol's requests.
    assert door.complete(key=CLIENT_KEYS["dave"]).status == 200


def test_nothing_the_client_gets_names_a_pair_address(door: FrontDoorUnderTest) -> None:
    answers = [
        door.request("/v1/models"),
        door.request("/v1/models/"),  # the pair redirects to its own address
        door.request("/nothing-here"),
        door.request(body={"prompt": "hi"}, key=None),
        door.declared(MAX_REQUEST_BYTES + 1),
    ]
    assert [a.status for a in answers] == [200, 307, 404, 401, 413]
    assert answers[1].headers["location"] == "/v1/models"
    addresses = [double.address for double in door.pairs.values()]
    ports = [str(double.port) for double in door.pairs.values()]
    for answer in answers:
        text = json.dumps(answer.headers) + answer.body.decode(errors="replace")
        assert "pair double" not in text  # the pair's Server header
        for needle in [*addresses, *ports]:
            assert needle not in text, (answer.status, text)


def test_tls_with_the_generated_certificate(door: FrontDoorUnderTest) -> None:
    text = subprocess.run(
        ["openssl", "x509", "-in", str(door.certificate), "-noout", "-text"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "DNS:door.test" in text
    assert "IP Address:127.0.0.1" in text
    # Checked against the name clients use, connected to an address that name need not resolve to.
    probe = subprocess.run(
        [
            sys.executable,
            str(CTL),
            "probe",
            "--address",
            "127.0.0.1",
            "--port",
            str(door.variables["front_door_port"]),
            "--server-name",
            "door.test",
            "--cafile",
            str(door.certificate),
            "--key-env",
            "KEY",
        ],
        capture_output=True,
        text=True,
        env={"KEY": CLIENT_KEYS["alice"]},
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout) == {"accepted": 200, "refused": 401}
    wrong_name = subprocess.run(
        [
            sys.executable,
            str(CTL),
            "probe",
            "--address",
            "127.0.0.1",
            "--port",
            str(door.variables["front_door_port"]),
            "--server-name",
            "elsewhere.test",
            "--cafile",
            str(door.certificate),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert wrong_name.returncode == 1
    assert "elsewhere.test" in wrong_name.stderr
    # Plain HTTP to the TLS port is not served.
    plain = http.client.HTTPConnection("127.0.0.1", door.variables["front_door_port"], timeout=5)
    with pytest.raises((http.client.HTTPException, ConnectionError, socket.timeout)):
        plain.request("GET", "/v1/models")
        plain.getresponse().read()


def test_metrics_in_prometheus_text_and_the_front_doors_health(door: FrontDoorUnderTest) -> None:
    port = int(door.variables["front_door_metrics_port"])
    door.complete()
    metrics = door.request("/metrics", key=None, plain=True, port=port)
    assert metrics.status == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.body.decode()
    for name in ("pair_one", "pair_two"):
        assert f'haproxy_server_status{{proxy="pairs",server="{name}",state="UP"}} 1' in text
        assert f'haproxy_server_status{{proxy="pair-{name}",server="{name}",state="UP"}} 1' in text
    assert 'haproxy_backend_http_responses_total{proxy="pairs",code="2xx"}' in text
    assert 'haproxy_frontend_http_requests_total{proxy="public"}' in text
    for double in door.pairs.values():
        assert double.address not in text
    health = door.request("/health", key=None, plain=True, port=port)
    assert (health.status, health.json()) == (200, {"status": "ok"})


def test_the_gate_listens_on_loopback_only(door: FrontDoorUnderTest) -> None:
    port = int(door.variables["front_door_gate_port"])
    config = door.config.read_text()
    assert f"    bind 127.0.0.1:{port}\n" in config
    # Bound to 127.0.0.1 itself, not to every address: another address of the host is refused.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", port), timeout=2).close()
    wait_until(lambda: door.gate("pair_one").status == 200, 2, "the gate answers on 127.0.0.1")
