"""A configuration change reloads HAProxy as the role's unit does (save the servers' states, then
SIGUSR2 to the master): requests in flight finish, a drained pair stays drained."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.front_door.door import front_door, wait_until
from tests.front_door.test_health import in_flight, session_on


def test_a_reload_keeps_requests_in_flight_and_a_drained_pair_drained(tmp_path: Path) -> None:
    directory = tmp_path / "rl"
    directory.mkdir()
    with front_door(directory, ("pair_one", "pair_two"), master_worker=True) as door:
        assert door.ctl("drain", "pair_one", "--timeout", "5").returncode == 0
        session = session_on(door, "pair_two")
        wait = in_flight(door, session, delay=2)
        wait_until(lambda: door.pairs["pair_two"].in_flight == 1, 5, "a request in flight")
        door.write_config(front_door_max_request_bytes=1000)
        saved = door.ctl("save-state", str(door.variables["front_door_state_file"]))
        assert saved.returncode == 0, saved.stderr
        assert "saved the state of 4 server(s)" in saved.stdout
        assert door.process is not None
        door.process.send_signal(signal.SIGUSR2)
        wait_until(
            lambda: door.complete(prompt="x" * 1000).status == 413, 10, "the new configuration"
        )
        answer = wait()
        assert (answer.status, answer.json()["pair"]) == (200, "pair_two")
        states = door.states()
        assert states["pair_one"].status == "MAINT"
        assert states["pair_two"].status == "UP"
        assert door.process.poll() is None
