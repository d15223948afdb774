#!/usr/bin/env python3
"""Observe one Spark for the doctor, read-only, and print the observations as JSON.

Shipped to the node and run there by the pair_doctor role (tasks/observe.yml), so it uses the
standard library only. Nothing here writes: it reads sysfs, procfs, the service's env files and
journal, and asks Docker about the runtime image (a throwaway `--rm` container with no network
reads /etc/nccl.conf).

    pair_doctor_collect.py '{"rail_interfaces": [...], "service_units": [...], ...}'
"""

from __future__ import annotations

import json
import re
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Only these service settings are reported; anything that could be a secret stays on the node.
REPORTED_ENV = re.compile(r"^(NCCL|GLOO|UCX|VLLM_DUALPATH)_\w+$")
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
NCCL_LINE = re.compile(r"NCCL (INFO|WARN)")
MAX_NCCL_LINES = 400
# What a TP2 collective that hangs leaves in the journal: torch's watchdog ending it, and vLLM's
# broadcast queue waiting on a rank that never comes back (vLLM issues 41725, 42354).
HANG_LINE = re.compile(
    r"Watchdog caught collective operation timeout|No available shared memory broadcast block"
)
MAX_HANG_LINES = 5
# A bind mount over the NCCL that pip installs with torch: the node's NCCL is what runs.
SYSTEM_NCCL_MOUNT = re.compile(r"dst=\S*/nvidia/nccl/lib/libnccl\.so[.\d]*[,\s]")


def run(argv: list[str], timeout: float = 60) -> tuple[int, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return 127, str(error)
    return done.returncode, done.stdout + done.stderr


def read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def interfaces(names: list[str], sysfs: Path) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for name in names:
        base = sysfs / "class/net" / name
        mtu = read(base / "mtu")
        _, addr_out = run(["ip", "-4", "-o", "addr", "show", "dev", name])
        seen[name] = {
            "present": base.exists(),
            "mtu": int(mtu) if mtu and mtu.isdigit() else None,
            "operstate": read(base / "operstate"),
            "ipv4": re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", addr_out),
        }
    return seen


def rdma(sysfs: Path) -> dict[str, Any]:
    root = sysfs / "class/infiniband"
    if not root.is_dir():
        return {"present": False, "devices": {}}
    devices: dict[str, Any] = {}
    for device in sorted(root.iterdir()):
        ports: dict[str, Any] = {}
        for port in sorted((device / "ports").glob("*")):
            gids = []
            for gid_file in sorted((port / "gids").glob("*"), key=lambda p: int(p.name)):
                gid = read(gid_file)
                if not gid or gid.replace("0", "").replace(":", "") == "":
                    continue
                index = gid_file.name
                gids.append(
                    {
                        "index": int(index),
                        "gid": gid,
                        "type": read(port / "gid_attrs/types" / index),
                        "ndev": read(port / "gid_attrs/ndevs" / index),
                    }
                )
            ports[port.name] = {
                "state": read(port / "state"),
                "link_layer": read(port / "link_layer"),
                "gids": gids,
            }
        netdevs = sorted(p.name for p in (device / "device/net").glob("*"))
        devices[device.name] = {"netdevs": netdevs, "ports": ports}
    return {"present": bool(devices), "devices": devices}


def meminfo(procfs: Path) -> dict[str, int | None]:
    values: dict[str, int] = {}
    for line in (read(procfs / "meminfo") or "").splitlines():
        key, _, rest = line.partition(":")
        number = rest.split()
        if number and number[0].isdigit():
            values[key] = int(number[0])
    keys = ("MemTotal", "MemAvailable", "CmaTotal", "CmaFree")
    return {f"{key}_kb": values.get(key) for key in keys}


def memlock() -> dict[str, int | None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    unlimited = resource.RLIM_INFINITY
    return {
        "soft_bytes": None if soft == unlimited else soft,
        "hard_bytes": None if hard == unlimited else hard,
    }


def clock() -> dict[str, Any]:
    epoch = time.time()
    rc, out = run(["timedatectl", "show", "-p", "NTPSynchronized", "--value"], timeout=10)
    synced = {"yes": True, "no": False}.get(out.strip()) if rc == 0 else None
    return {"epoch": epoch, "ntp_synchronized": synced}


def env_file(path: Path) -> dict[str, str] | None:
    text = read(path)
    if text is None:
        return None
    settings = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        key = key.removeprefix("export ").strip()
        if sep and REPORTED_ENV.match(key) and not any(w in key for w in SECRET_WORDS):
            settings[key] = value.strip().strip('"').strip("'")
    return settings


def unit(name: str, log_lines: int) -> dict[str, Any]:
    rc, shown = run(["systemctl", "show", name, "-p", "LoadState,ActiveState,ExecStart"])
    props = dict(line.partition("=")[::2] for line in shown.splitlines() if "=" in line)
    command = props.get("ExecStart", "")
    _, journal = run(["journalctl", "-u", name, "-n", str(log_lines), "--no-pager", "-o", "cat"])
    nccl_lines = [line for line in journal.splitlines() if NCCL_LINE.search(line)]
    return {
        "loaded": rc == 0 and props.get("LoadState") == "loaded",
        "active": props.get("ActiveState") == "active",
        # Only flags are reported: the command line itself may carry settings not meant to leave.
        "memlock_unlimited": bool(re.search(r"--ulimit[= ]memlock=-1(:-1)?\b", command)),
        "ipc_lock": bool(re.search(r"--cap-add[= ]IPC_LOCK\b", command)),
        "infiniband_device": "/dev/infiniband" in command,
        "system_nccl_mounted": bool(SYSTEM_NCCL_MOUNT.search(command + " ")),
        "nccl_log": nccl_lines[-MAX_NCCL_LINES:],
        "hang_lines": [line for line in journal.splitlines() if HANG_LINE.search(line)][
            -MAX_HANG_LINES:
        ],
    }


def image(ref: str) -> dict[str, Any]:
    if not ref:
        return {"ref": "", "present": False}
    rc, out = run(["docker", "image", "inspect", "--format", "{{json .}}", ref])
    if rc != 0:
        return {"ref": ref, "present": False, "error": out.strip()[-300:]}
    info = json.loads(out)
    probe = "if [ -e /etc/nccl.conf ]; then cat /etc/nccl.conf; else echo __absent__; fi"
    rc, conf = run(
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", ref, "-c", probe],
        timeout=120,
    )
    return {
        "ref": ref,
        "present": True,
        "id": info.get("Id"),
        "repo_digests": info.get("RepoDigests") or [],
        "nccl_conf": None if rc != 0 or conf.strip() == "__absent__" else conf.strip(),
        "nccl_conf_probe_ok": rc == 0,
    }


def collect(settings: dict[str, Any]) -> dict[str, Any]:
    sysfs = Path(settings.get("sysfs_root", "/sys"))
    procfs = Path(settings.get("proc_root", "/proc"))
    observed_clock = clock()  # first, so that both nodes read their clocks close together
    env_files = settings.get("service_env_files", [])
    # The container's other env files, which the unit writes at each start (rail_gid_env.py):
    # read after the static ones, so their settings win.
    runtime_env_files = settings.get("service_runtime_env_files", [])
    return {
        "hostname": socket.gethostname(),
        "clock": observed_clock,
        "interfaces": interfaces(settings.get("rail_interfaces", []), sysfs),
        "rdma": rdma(sysfs),
        "memory": meminfo(procfs),
        "memlock": memlock(),
        "service_env": {path: env_file(Path(path)) for path in env_files},
        "service_runtime_env": {path: env_file(Path(path)) for path in runtime_env_files},
        "units": {
            name: unit(name, int(settings.get("service_log_lines", 5000)))
            for name in settings.get("service_units", [])
        },
        "image": image(str(settings.get("image_ref", ""))),
    }


if __name__ == "__main__":
    print(json.dumps(collect(json.loads(sys.argv[1] if len(sys.argv) > 1 else "{}"))))
