"""The known failure modes of a two-Spark TP2 service, each judged from both nodes' observations.

Every check takes the pair's observations (host name -> what pair_doctor_collect.py printed
there, plus `nccl_transport`: what the pair_evidence role reads from the NCCL lines of the node's
units) and the expectations, and returns findings: an OK when healthy, SKIPPED with the reason
when it cannot apply (no RDMA device, no service unit), otherwise an ERROR or WARNING with its fix.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .findings import Finding, Severity

Observations = Mapping[str, Mapping[str, Any]]
PAIR = "pair"
# The transports pair_evidence names in its reading of NCCL's lines.
TRANSPORT_IB = "IB"
TRANSPORT_SOCKET = "Socket"


@dataclass(frozen=True)
class Expectations:
    rail_mtu: int = 9000
    rail_interfaces: tuple[str, ...] = ("enp1s0f1np1", "enP2p1s0f1np1")
    min_available_gib: float = 100.0
    max_clock_skew_s: float = 0.5


GID_KEY = "NCCL_IB_GID_INDEX"
RESTART_FIX = (
    "restart the pair in order (stop rank 0's unit, restart rank 1's, then start rank 0's): "
    "each start writes the index it finds then (rail_gid_env.py)"
)
PIN_FIX = (
    "re-run playbooks/service.yml: it rediscovers the index and restarts the pair in order "
    "(or drop the pin and let NCCL choose)"
)


def gid_index_drift(observed: Observations, expect: Expectations) -> list[Finding]:
    """The GID index the service uses must still be the RoCE v2 GID carrying the rail address.

    The unit writes the index to a runtime env file at each start (rail_gid_env.py), which the
    container reads after the static env file, so its value wins; without one, the static pin
    is what the service uses.
    """
    findings = []
    for host, node in observed.items():
        if not node["rdma"]["present"]:
            findings.append(_skip("gid_index_drift", host, "no RDMA device found"))
        else:
            findings.append(_gid_finding(host, node, expect))
    return findings


def _gid_finding(host: str, node: Mapping[str, Any], expect: Expectations) -> Finding:
    def finding(severity: Severity, summary: str, fix: str = "") -> Finding:
        return Finding("gid_index_drift", host, severity, summary, fix)

    current = _rail_gid_indexes(node, expect)
    runtime: Mapping[str, Mapping[str, str] | None] = node.get("service_runtime_env") or {}
    written = ", ".join(runtime)
    if runtime and not any(unit["active"] for unit in node["units"].values()):
        if not current:
            return finding(
                Severity.ERROR,
                f"the service is stopped and its next start will fail: its unit writes {GID_KEY} "
                f"to {written} at each start, but no RoCE v2 GID carries a rail IPv4 address now",
                "check the rail addresses and links (`ip -4 addr`), then run playbooks/network.yml",
            )
        return finding(
            Severity.OK,
            f"the service is stopped; its next start writes {GID_KEY} to {written} again "
            f"(discovered now: {current})",
        )
    missing = [path for path, settings in runtime.items() if settings is None]
    if missing:
        return finding(
            Severity.WARNING,
            f"the running service's container read {', '.join(missing)} at its start, which is "
            f"gone now: which {GID_KEY} it uses cannot be told",
            RESTART_FIX,
        )
    value, source = _effective_setting(node, GID_KEY)
    if value in (None, "", "-1"):
        return finding(
            Severity.OK, f"the service leaves the GID index to NCCL (discovered now: {current})"
        )
    at_start = source in runtime
    uses = f"the service uses {GID_KEY}={value} ({'written to ' if at_start else 'pinned in '}"
    uses += f"{source}{' at its start' if at_start else ''})"
    fix = RESTART_FIX if at_start else PIN_FIX
    if not current:
        return finding(
            Severity.ERROR,
            f"{uses}, but no RoCE v2 GID carries a rail IPv4 address now",
            "check the rail addresses (`ip -4 addr`, playbooks/network.yml), then " + fix,
        )
    if not value.isdigit() or {int(value)} != set(current.values()):
        return finding(
            Severity.ERROR,
            f"{uses}; the RoCE v2 GID of the rail address is now at {current} (the GID table "
            "was rebuilt since)",
            fix,
        )
    return finding(Severity.OK, f"{uses}: still the rail's RoCE v2 GID {current}")


def mtu_mismatch(observed: Observations, expect: Expectations) -> list[Finding]:
    """Each rail twin must be up with the same MTU on both ends (else IBV_WC_RETRY_EXC_ERR)."""
    findings = []
    fix = (
        "re-run playbooks/network.yml on the pair (it sets MTU "
        f"{expect.rail_mtu} on both ends and proves it with ping -M do)"
    )
    for name in expect.rail_interfaces:
        mtus: dict[str, int | None] = {}
        for host, node in observed.items():
            link = node["interfaces"].get(name, {})
            if not link.get("present"):
                findings.append(
                    Finding(
                        "mtu_mismatch",
                        host,
                        Severity.ERROR,
                        f"rail interface {name} is missing",
                        fix,
                    )
                )
                continue
            if link.get("operstate") not in ("up", "unknown"):
                findings.append(
                    Finding(
                        "mtu_mismatch",
                        host,
                        Severity.ERROR,
                        f"{name} is {link.get('operstate')}, not up",
                        f"check the cable and `ip link set {name} up`; {fix}",
                    )
                )
            mtus[host] = link.get("mtu")
        if not mtus:
            continue
        if len(set(mtus.values())) > 1:
            findings.append(
                Finding(
                    "mtu_mismatch",
                    PAIR,
                    Severity.ERROR,
                    f"{name} MTU differs between the nodes: {mtus}",
                    fix,
                )
            )
        elif next(iter(mtus.values())) != expect.rail_mtu:
            findings.append(
                Finding(
                    "mtu_mismatch",
                    PAIR,
                    Severity.WARNING,
                    f"{name} MTU is {next(iter(mtus.values()))} on both nodes, "
                    f"not the configured {expect.rail_mtu}",
                    fix,
                )
            )
        else:
            findings.append(
                Finding(
                    "mtu_mismatch", PAIR, Severity.OK, f"{name} MTU {expect.rail_mtu} on both nodes"
                )
            )
    return findings


def rdma_port_state(observed: Observations, expect: Expectations) -> list[Finding]:
    """Every port of the RDMA devices behind the rail twins must be ACTIVE."""
    findings = []
    for host, node in observed.items():
        if not node["rdma"]["present"]:
            findings.append(_skip("rdma_port_state", host, "no RDMA device found"))
            continue
        for device, info in node["rdma"]["devices"].items():
            if not set(info["netdevs"]) & set(expect.rail_interfaces):
                continue  # not on the rail: the other CX-7 port may well be uncabled
            for port, state in info["ports"].items():
                text = state.get("state") or "unknown"
                if "ACTIVE" in text:
                    findings.append(
                        Finding(
                            "rdma_port_state", host, Severity.OK, f"{device} port {port}: {text}"
                        )
                    )
                else:
                    findings.append(
                        Finding(
                            "rdma_port_state",
                            host,
                            Severity.ERROR,
                            f"{device} port {port} is {text}, not ACTIVE",
                            "check the link (`ibv_devinfo`, `ip link`), then re-run "
                            "playbooks/network.yml",
                        )
                    )
    return findings


def socket_fallback(observed: Observations, expect: Expectations) -> list[Finding]:
    """NET/Socket in the service's NCCL log: TP2 traffic crosses the rail over TCP."""
    findings = []
    for host, node in observed.items():
        lines = [line for unit in node["units"].values() for line in unit["nccl_log"]]
        if not lines:
            findings.append(
                _skip(
                    "socket_fallback",
                    host,
                    "the service's journal holds no NCCL lines (NCCL_DEBUG=INFO in the service env "
                    "records the transport at startup)",
                )
            )
            continue
        report = node["nccl_transport"]
        if report["transport"] == TRANSPORT_SOCKET:
            severity = Severity.ERROR if node["rdma"]["present"] else Severity.WARNING
            findings.append(
                Finding(
                    "socket_fallback",
                    host,
                    severity,
                    "NCCL uses NET/Socket, not IB verbs: " + "; ".join(report["evidence"][:2]),
                    "give the container --device /dev/infiniband, --cap-add IPC_LOCK and "
                    "--ulimit memlock=-1:-1 and name both HCAs in NCCL_IB_HCA "
                    "(playbooks/service.yml does), then restart the pair",
                )
            )
        elif report["transport"] == TRANSPORT_IB:
            findings.append(
                Finding(
                    "socket_fallback",
                    host,
                    Severity.OK,
                    f"NCCL uses NET/IB over {', '.join(report['ib_devices']) or 'IB'}",
                )
            )
        else:
            findings.append(
                _skip("socket_fallback", host, "the NCCL lines name no inter-node transport")
            )
    return findings


def nccl_conf_in_image(observed: Observations, expect: Expectations) -> list[Finding]:
    findings = []
    for host, node in observed.items():
        image = node["image"]
        if not image.get("present"):
            findings.append(
                _skip("nccl_conf_in_image", host, "the runtime image is not on this node")
            )
        elif not image.get("nccl_conf_probe_ok"):
            findings.append(_skip("nccl_conf_in_image", host, "could not look inside the image"))
        elif image.get("nccl_conf"):
            settings = ", ".join(image["nccl_conf"].splitlines()[:4])
            findings.append(
                Finding(
                    "nccl_conf_in_image",
                    host,
                    Severity.WARNING,
                    f"the image carries /etc/nccl.conf ({settings}): it changes defaults silently",
                    "use an image without /etc/nccl.conf, or set each of its settings in the "
                    "service env (the environment wins over the file)",
                )
            )
        else:
            findings.append(
                Finding("nccl_conf_in_image", host, Severity.OK, "no /etc/nccl.conf in the image")
            )
    return findings


PIP_NCCL_FIX = (
    "set vllm_tp2_service_system_nccl to the node's libnccl.so.2 (DGX OS: "
    "/usr/lib/aarch64-linux-gnu/libnccl.so.2, package libnccl2) and re-run playbooks/service.yml: "
    "it is mounted read-only over the image's copy (vllm_tp2_service_image_nccl)"
)


def pip_nccl(observed: Observations, expect: Expectations) -> list[Finding]:
    """The NCCL that pip installs with torch: on GB10 pairs it hangs TP2 collectives after 20-30
    minutes under load, where the system's build of the same version does not (vLLM issues 41725,
    42354). A hang leaves torch's watchdog timeout or vLLM's broadcast wait in the journal."""
    findings = []
    for host, node in observed.items():
        units = [unit for unit in node["units"].values() if unit["loaded"]]
        hangs = [line for unit in units for line in unit["hang_lines"]]
        if not units:
            findings.append(_skip("pip_nccl", host, "no service unit on this node"))
        elif all(unit["system_nccl_mounted"] for unit in units):
            findings.append(
                Finding(
                    "pip_nccl",
                    host,
                    Severity.OK,
                    "the service runs the node's NCCL, mounted over the image's pip build",
                )
            )
        elif hangs:
            findings.append(
                Finding(
                    "pip_nccl",
                    host,
                    Severity.ERROR,
                    "the service runs the NCCL pip installs with torch, and its journal shows a "
                    f"collective that hung: {hangs[-1].strip()[:300]}",
                    PIP_NCCL_FIX,
                )
            )
        else:
            findings.append(
                Finding(
                    "pip_nccl",
                    host,
                    Severity.WARNING,
                    "the service runs the NCCL pip installs with torch, which hangs TP2 "
                    "collectives on GB10 pairs after 20-30 minutes under load",
                    PIP_NCCL_FIX,
                )
            )
    return findings


def platform_change(observed: Observations, expect: Expectations) -> list[Finding]:
    """The kernel, GPU driver or RDMA firmware changed since the last validated run (read by
    pair_evidence's pair_platform into `platform`): what a firmware update or an upgrade brings
    (an MTU back at 1500, GIDs in other slots, another NCCL path) was never proven on this node."""
    findings = []
    for host, node in observed.items():
        since = node["platform"]["since_validated"]
        if since is None:
            findings.append(
                _skip(
                    "platform_change",
                    host,
                    "no validated run recorded on this node (playbooks/validate.yml records one)",
                )
            )
        elif since:
            findings.append(
                Finding(
                    "platform_change",
                    host,
                    Severity.WARNING,
                    "changed since the last validated run: " + "; ".join(since),
                    "run playbooks/validate.yml: it proves the rail, RDMA and NCCL on what runs "
                    "now and records it (the mtu_mismatch and gid_index_drift findings show what "
                    "a firmware update commonly moves)",
                )
            )
        else:
            findings.append(
                Finding(
                    "platform_change",
                    host,
                    Severity.OK,
                    "kernel, GPU driver and RDMA firmware as at the last validated run",
                )
            )
    return findings


def cma(observed: Observations, expect: Expectations) -> list[Finding]:
    """CmaFree above CmaTotal: the broken CMA state behind ibv_reg_mr ENOMEM.

    A CMA of 0 kB is healthy (7.0 kernels reserve none, and kho=off keeps it so). On kernels that
    enable Kexec HandOver by default, its scratch area becomes CMA pageblocks no CMA area counts:
    long-term pins must migrate off them and, under memory pressure, fail.
    """
    findings = []
    fix = (
        "boot with the kernel parameter kho=off: install NVIDIA's nvidia-spark-grub-kho package "
        "(or add kho=off to GRUB_CMDLINE_LINUX_DEFAULT and run update-grub), reboot, then check "
        "`grep -o kho=off /proc/cmdline` and that CmaFree is not above CmaTotal in /proc/meminfo"
    )
    for host, node in observed.items():
        total = node["memory"].get("CmaTotal_kb")
        free = node["memory"].get("CmaFree_kb")
        if total is None or free is None or free <= total:
            seen = (
                "the kernel reports no CMA"
                if total is None
                else f"CMA {total} kB" + ("" if free is None else f", {free} kB free")
            )
            findings.append(Finding("cma", host, Severity.OK, seen))
            continue
        seen = (
            f"CmaFree {free} kB is above CmaTotal {total} kB: Kexec HandOver's scratch pages are "
            "marked CMA outside any CMA area, and RDMA memory registration (ibv_reg_mr) fails "
            "with ENOMEM once memory is tight"
        )
        if node["rdma"]["present"]:
            findings.append(Finding("cma", host, Severity.ERROR, seen, fix))
        else:
            findings.append(
                Finding(
                    "cma",
                    host,
                    Severity.WARNING,
                    f"{seen} (no RDMA device found here, so nothing fails yet)",
                    fix,
                )
            )
    return findings


def memlock(observed: Observations, expect: Expectations) -> list[Finding]:
    """RDMA pins memory: the service container needs unlimited memlock and IPC_LOCK."""
    findings = []
    for host, node in observed.items():
        units = {name: unit for name, unit in node["units"].items() if unit["loaded"]}
        if not units:
            findings.append(_skip("memlock", host, "no service unit installed"))
            continue
        for name, unit in units.items():
            missing = [
                flag
                for flag, ok in (
                    ("--ulimit memlock=-1:-1", unit["memlock_unlimited"]),
                    ("--cap-add IPC_LOCK", unit["ipc_lock"]),
                )
                if not ok
            ]
            if missing:
                # Without RDMA nothing pins memory, so the gap only matters once there is a rail.
                severity = Severity.ERROR if node["rdma"]["present"] else Severity.WARNING
                findings.append(
                    Finding(
                        "memlock",
                        host,
                        severity,
                        f"{name} runs the container without {' and '.join(missing)}",
                        "re-run playbooks/service.yml (its unit template sets both)",
                    )
                )
            else:
                findings.append(
                    Finding("memlock", host, Severity.OK, f"{name}: unlimited memlock and IPC_LOCK")
                )
    return findings


def free_memory(observed: Observations, expect: Expectations) -> list[Finding]:
    """Unified memory: too little free before launch wedges GB10 instead of failing cleanly."""
    findings = []
    for host, node in observed.items():
        if any(unit["active"] for unit in node["units"].values()):
            findings.append(
                _skip(
                    "free_memory",
                    host,
                    "the service is running (this check is for before a launch)",
                )
            )
            continue
        available = (node["memory"].get("MemAvailable_kb") or 0) / 1024 / 1024
        if available < expect.min_available_gib:
            findings.append(
                Finding(
                    "free_memory",
                    host,
                    Severity.WARNING,
                    f"{available:.1f} GiB available, below the {expect.min_available_gib:g} GiB "
                    "a launch needs",
                    "stop what else uses memory, then `sync; echo 3 > /proc/sys/vm/drop_caches` on "
                    "both nodes before starting the service",
                )
            )
        else:
            findings.append(
                Finding("free_memory", host, Severity.OK, f"{available:.1f} GiB available")
            )
    return findings


def image_digest(observed: Observations, expect: Expectations) -> list[Finding]:
    ids = {host: node["image"].get("id") for host, node in observed.items()}
    refs = {node["image"].get("ref") for node in observed.values()}
    fix = (
        "re-run playbooks/runtime.yml: it pulls the pinned digest on both nodes (or copies the "
        "image from the peer) and compares them"
    )
    if refs == {""}:
        return [_skip("image_digest", PAIR, "no runtime image reference known")]
    missing = sorted(host for host, image_id in ids.items() if not image_id)
    if missing:
        return [
            Finding(
                "image_digest",
                PAIR,
                Severity.ERROR,
                f"the runtime image is missing on {', '.join(missing)}",
                fix,
            )
        ]
    if len(set(ids.values())) > 1:
        return [
            Finding(
                "image_digest", PAIR, Severity.ERROR, f"the nodes run different images: {ids}", fix
            )
        ]
    return [
        Finding(
            "image_digest", PAIR, Severity.OK, f"both nodes hold image {next(iter(ids.values()))}"
        )
    ]


def clock_skew(observed: Observations, expect: Expectations) -> list[Finding]:
    findings = []
    fix = "enable time sync on both nodes (`timedatectl set-ntp true`, chrony or systemd-timesyncd)"
    for host, node in observed.items():
        if node["clock"].get("ntp_synchronized") is False:
            findings.append(
                Finding(
                    "clock_skew", host, Severity.WARNING, "the clock is not NTP-synchronised", fix
                )
            )
    epochs = [node["clock"]["epoch"] for node in observed.values()]
    skew = max(epochs) - min(epochs)
    if skew > expect.max_clock_skew_s:
        findings.append(
            Finding(
                "clock_skew",
                PAIR,
                Severity.WARNING,
                f"the clocks differ by {skew:.2f} s (read at the same moment, "
                "within the connection's latency)",
                fix,
            )
        )
    else:
        findings.append(
            Finding("clock_skew", PAIR, Severity.OK, f"the clocks agree within {skew:.2f} s")
        )
    return findings


CHECKS: dict[str, Callable[[Observations, Expectations], list[Finding]]] = {
    "gid_index_drift": gid_index_drift,
    "mtu_mismatch": mtu_mismatch,
    "rdma_port_state": rdma_port_state,
    "socket_fallback": socket_fallback,
    "nccl_conf_in_image": nccl_conf_in_image,
    "pip_nccl": pip_nccl,
    "platform_change": platform_change,
    "cma": cma,
    "memlock": memlock,
    "free_memory": free_memory,
    "image_digest": image_digest,
    "clock_skew": clock_skew,
}


def diagnose(
    observed: Observations, expect: Expectations, only: tuple[str, ...] = ()
) -> list[Finding]:
    return [
        finding
        for name, check in CHECKS.items()
        if not only or name in only
        for finding in check(observed, expect)
    ]


def _skip(check: str, host: str, reason: str) -> Finding:
    return Finding(check, host, Severity.SKIPPED, reason)


def _effective_setting(node: Mapping[str, Any], key: str) -> tuple[str | None, str | None]:
    """(value, file) of `key` as the container sees it: runtime env files after the static ones."""
    value: str | None = None
    source: str | None = None
    for files in (node["service_env"], node.get("service_runtime_env") or {}):
        for path, settings in files.items():
            if settings and key in settings:
                value, source = str(settings[key]), path
    return value, source


def _rail_gid_indexes(node: Mapping[str, Any], expect: Expectations) -> dict[str, int]:
    """device -> index of the RoCE v2 GID whose address is a rail IPv4 of this node."""
    rail_addresses = {
        ipaddress.IPv4Address(address)
        for name in expect.rail_interfaces
        for address in node["interfaces"].get(name, {}).get("ipv4", [])
    }
    found = {}
    for device, info in node["rdma"]["devices"].items():
        for port in info["ports"].values():
            for gid in port["gids"]:
                if "v2" not in (gid.get("type") or "").lower():
                    continue
                mapped = ipaddress.IPv6Address(gid["gid"]).ipv4_mapped
                if mapped in rail_addresses:
                    found[device] = gid["index"]
    return found
