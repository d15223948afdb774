"""From the unit to the observation: pair_probe reads the container's env files from the unit's
`docker run` (the static one, then the runtime one the unit writes at each start with the rail's
GID index), and the doctor's observe step reports the runtime file apart, so that the judge
knows which NCCL_IB_GID_INDEX the running container got. systemctl and docker are stand-ins."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import REPO, output_of, run_local_play

SYSTEMCTL = """#!/bin/sh
exec_start='{{ path=/usr/bin/docker ; argv[]=/usr/bin/docker run --rm --name vllm-tp2-rank1 \
--cap-add IPC_LOCK --env-file {static} --env-file {runtime} img vllm serve /model --headless ; \
ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }}'
case "$*" in
  *--value*) echo "$exec_start" ;;
  *LoadState,ActiveState,ExecStart*)
    printf 'LoadState=loaded\\nActiveState=active\\nExecStart=%s\\n' "$exec_start" ;;
  *) printf 'LoadState=loaded\\nActiveState=active\\nEnvironmentFiles=%s (ignore_errors=no)\\n' \\
       {static} ;;
esac
"""


def stand_in(directory: Path, name: str, text: str) -> None:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)


def test_the_runtime_env_file_reaches_the_observation(tmp_path: Path) -> None:
    static, runtime = tmp_path / "etc/vllm-tp2-rank1.env", tmp_path / "run/vllm-tp2-rank1.rail.env"
    static.parent.mkdir()
    runtime.parent.mkdir()
    static.write_text(
        "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1\nNCCL_IB_GID_INDEX=3\n", encoding="utf-8"
    )
    runtime.write_text("# written at unit start\nNCCL_IB_GID_INDEX=4\n", encoding="utf-8")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in(bin_dir, "systemctl", SYSTEMCTL.format(static=static, runtime=runtime))
    stand_in(bin_dir, "docker", "#!/bin/sh\nexit 1\n")
    out = tmp_path / "seen.json"
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "spark_pair_rank": 1,
                "pair_probe_docker": str(bin_dir / "docker"),
                "pair_doctor_rail_interfaces": [],
            },
            "tasks": [
                {
                    "ansible.builtin.include_role": {
                        "name": str(REPO / "roles/pair_probe"),
                        "tasks_from": "service.yml",
                        "public": True,  # the doctor reads pair_probe's settings
                    }
                },
                {
                    "ansible.builtin.include_role": {
                        "name": str(REPO / "roles/pair_doctor"),
                        "tasks_from": "observe.yml",
                    }
                },
                {
                    "ansible.builtin.copy": {
                        "dest": str(out),
                        "mode": "0600",
                        "content": "{{ {'files': pair_probe_container_env_files,"
                        " 'static': pair_doctor_observations.service_env,"
                        " 'runtime': pair_doctor_observations.service_runtime_env} | to_json }}",
                    }
                },
            ],
        }
    ]
    result = run_local_play(tmp_path, play, f"PATH={bin_dir}:{REPO / '.venv/bin'}:/usr/bin:/bin")
    assert result.returncode == 0, output_of(result)
    seen = json.loads(out.read_text(encoding="utf-8"))
    assert seen["files"] == [str(static), str(runtime)]
    assert seen["static"] == {
        str(static): {"NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1", "NCCL_IB_GID_INDEX": "3"}
    }
    assert seen["runtime"] == {str(runtime): {"NCCL_IB_GID_INDEX": "4"}}
