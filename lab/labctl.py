#!/usr/bin/env python3
"""Build and run the lab: two systemd hosts joined by a two-link rail, standing in for a Spark pair.

Every test host in this repository is made here: the README's lab, and every molecule scenario
(through molecule/shared/create.yml and destroy.yml), so there is one way to make them.

    labctl.py image [--rebuild]              build the base image (debootstrap + docker import)
    labctl.py up   [--prefix P] [--host H] [--rail A,B]
                                             start the hosts on a network of their own (they
                                             reach each other by container name) and a rail
                                             between each pair (default: the first two hosts)
    labctl.py down [--prefix P] [--images]   remove the hosts (the rail goes with them); with
                                             --images also the base and stand-in images
    labctl.py status [--prefix P]
    labctl.py standin-image                  build the stand-in serving image (lab/standin)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

IMAGE = "dualspark-lab/node:bookworm"
# The stand-in serving image's repository (standin_image.REPOSITORY), built on IMAGE.
STANDIN_REPOSITORY = "dualspark-lab/vllm-standin"
SUITE = "bookworm"
LABEL = "dualspark.lab"
DEFAULT_PREFIX = "dualspark-lab"
DEFAULT_HOSTS = ("spark-a", "spark-b")
# The two ConnectX-7 port twins as DGX OS names them; the rail gets one veth link per twin.
RAIL_INTERFACES = ("enp1s0f1np1", "enP2p1s0f1np1")
PACKAGES_FILE = Path(__file__).with_name("image-packages.txt")
# Loaded by every Python on a lab host (lab/zip_bytecode_cache.py says why).
ZIP_BYTECODE_CACHE = Path(__file__).with_name("zip_bytecode_cache.py")
HOST_SITE_PACKAGES = Path("usr/lib/python3/dist-packages")
# Services of image-packages.txt that a role turns on where it is wanted (front door, metrics),
# as apt would leave them on a fresh node; off in the image, so a host runs only what its roles
# started.
DISABLED_UNITS = ("haproxy.service", "prometheus.service", "prometheus-node-exporter.service")
APT_SOURCES = (Path("/etc/apt/sources.list.d"), Path("/etc/apt/sources.list"))
# Units that cannot work inside a container; masked so the host reaches "running", not "degraded".
MASKED_UNITS = (
    "systemd-remount-fs.service",
    "systemd-udevd.service",
    "systemd-udev-trigger.service",
    "systemd-udevd-control.socket",
    "systemd-udevd-kernel.socket",
    "systemd-modules-load.service",
    "sys-kernel-config.mount",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "getty.target",
    "console-getty.service",
    "systemd-firstboot.service",
    "systemd-hwdb-update.service",
    "rdma-load-modules@.service",
    "rdma-hw.target",
    "rdma-ndd.service",
    "iwpmd.service",
    "srp_daemon.service",
)
RUN_OPTIONS = (
    "--cap-add",
    "SYS_ADMIN",
    "--cap-add",
    "NET_ADMIN",
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "apparmor=unconfined",
    "--cgroupns=host",
    "-v",
    "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs",
    "/run",
    "--tmpfs",
    "/run/lock",
    "--tmpfs",
    "/tmp",
)
BOOT_TIMEOUT_S = 120


class LabError(RuntimeError):
    """A lab step failed; the message says which and what to do."""


def log(message: str) -> None:
    print(f"[lab] {message}", flush=True)


def run(
    args: Sequence[str], *, check: bool = True, capture: bool = True, stdin: int | None = None
) -> subprocess.CompletedProcess[str]:
    try:
        result = subprocess.run(
            list(args), check=False, text=True, stdin=stdin, capture_output=capture
        )
    except FileNotFoundError as exc:
        raise LabError(f"'{args[0]}' is not installed; run bin/setup first") from exc
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip()
        raise LabError(f"'{' '.join(args)}' failed ({result.returncode}): {detail}")
    return result


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(("docker", *args), check=check)


def debian_mirror() -> str:
    """The first Debian mirror this machine's apt is configured with (deb822 or one-line format)."""
    files: list[Path] = []
    for source in APT_SOURCES:
        if source.is_dir():
            files.extend(sorted(source.glob("*.sources")) + sorted(source.glob("*.list")))
        elif source.is_file():
            files.append(source)
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                uris = re.search(r"^URIs:\s*(\S+)", stanza, re.MULTILINE)
                suites = re.search(r"^Suites:\s*(.+)$", stanza, re.MULTILINE)
                if uris and suites and SUITE in suites.group(1).split():
                    return uris.group(1)
        else:
            for line in text.splitlines():
                match = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+" + SUITE + r"\s", line)
                if match:
                    return match.group(1)
    raise LabError(f"no Debian '{SUITE}' mirror found in {', '.join(map(str, APT_SOURCES))}")


def image_packages() -> list[str]:
    lines = PACKAGES_FILE.read_text(encoding="utf-8").splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def image_recipe_digest() -> str:
    """Changes whenever what goes into the image changes, so a stale image is rebuilt."""
    recipe = json.dumps(
        {
            "suite": SUITE,
            "packages": image_packages(),
            "masked": MASKED_UNITS,
            "disabled": DISABLED_UNITS,
            "zip_bytecode_cache": hashlib.sha256(ZIP_BYTECODE_CACHE.read_bytes()).hexdigest(),
        }
    )
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def current_image_digest() -> str | None:
    result = docker(
        "image",
        "inspect",
        "--format",
        '{{ index .Config.Labels "' + LABEL + '.recipe" }}',
        IMAGE,
        check=False,
    )
    return result.stdout.strip() if result.returncode == 0 else None


def build_image(rebuild: bool) -> None:
    wanted = image_recipe_digest()
    if not rebuild and current_image_digest() == wanted:
        log(f"image {IMAGE} is up to date")
        return
    if shutil.which("debootstrap") is None:
        raise LabError("debootstrap is not installed; run bin/setup first")
    mirror = debian_mirror()
    with tempfile.TemporaryDirectory(prefix="dualspark-rootfs-") as workdir:
        rootfs = Path(workdir) / "rootfs"
        log(f"debootstrap {SUITE} from {mirror} (about a minute)")
        started = time.monotonic()
        proc = subprocess.Popen(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=" + ",".join(image_packages()),
                SUITE,
                str(rootfs),
                mirror,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        tail: deque[str] = deque(maxlen=20)
        for steps, line in enumerate(proc.stdout, start=1):
            tail.append(line.rstrip())
            if line.startswith("I: Base system installed") or steps % 100 == 0:
                print(f"  {time.monotonic() - started:4.0f} s  {line.strip()}", flush=True)
        if proc.wait() != 0:
            raise LabError("debootstrap failed:\n" + "\n".join(tail))
        log(f"rootfs ready in {time.monotonic() - started:.0f} s; importing")
        prepare_rootfs(rootfs)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        run(
            [
                "docker",
                "import",
                "-c",
                'CMD ["/lib/systemd/systemd"]',
                "-c",
                f"LABEL {LABEL}.recipe={wanted}",
                "-",
                IMAGE,
            ],
            stdin=tar.stdout.fileno() if tar.stdout else None,
        )
        if tar.wait() != 0:
            raise LabError("tar of the rootfs failed")
    log(f"built {IMAGE}")


def prepare_rootfs(rootfs: Path) -> None:
    units = rootfs / "etc/systemd/system"
    for unit in MASKED_UNITS:
        link = units / unit
        if not link.is_symlink():
            link.symlink_to("/dev/null")
    # The lab hosts reach each other's sshd over the rail (the weights copy uses it).
    (rootfs / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/ssh/sshd_config.d/lab.conf").write_text(
        "PermitRootLogin prohibit-password\nUseDNS no\n", encoding="utf-8"
    )
    for key in rootfs.glob("etc/ssh/ssh_host_*"):
        key.unlink()  # each host makes its own at first boot (ssh.service regenerates them)
    (rootfs / "etc/systemd/system/multi-user.target.wants").mkdir(parents=True, exist_ok=True)
    for unit in DISABLED_UNITS:
        (units / "multi-user.target.wants" / unit).unlink(missing_ok=True)
    keygen = units / "lab-ssh-keygen.service"
    keygen.write_text(
        "[Unit]\nDescription=Per-host SSH host keys for the lab\nBefore=ssh.service\n"
        "ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key\n\n"
        "[Service]\nType=oneshot\nExecStart=/usr/bin/ssh-keygen -A\n\n"
        "[Install]\nWantedBy=multi-user.target\n",
        encoding="utf-8",
    )
    wants = units / "multi-user.target.wants/lab-ssh-keygen.service"
    if not wants.is_symlink():
        wants.symlink_to("/etc/systemd/system/lab-ssh-keygen.service")
    (rootfs / "etc/machine-id").write_text("", encoding="utf-8")
    site_packages = rootfs / HOST_SITE_PACKAGES
    shutil.copyfile(ZIP_BYTECODE_CACHE, site_packages / ZIP_BYTECODE_CACHE.name)
    (site_packages / "zip-bytecode-cache.pth").write_text(
        f"import {ZIP_BYTECODE_CACHE.stem}\n", encoding="utf-8"
    )


def container_name(prefix: str, host: str) -> str:
    return f"{prefix}-{host}"


def container_pid(name: str) -> int:
    result = docker("inspect", "--format", "{{.State.Pid}} {{.State.Running}}", name, check=False)
    if result.returncode != 0:
        return 0
    pid, running = result.stdout.split()
    return int(pid) if running == "true" else 0


def start_host(prefix: str, host: str, docker_socket: bool) -> None:
    name = container_name(prefix, host)
    if container_pid(name):
        log(f"{name} already running")
        return
    docker("rm", "-f", name, check=False)
    extra: list[str] = []
    if docker_socket:
        # The service containers run on the VM's engine, inside the lab host's network namespace.
        extra += ["-v", "/var/run/docker.sock:/var/run/docker.sock"]
        client = shutil.which("docker")
        if client:
            extra += ["-v", f"{os.path.realpath(client)}:/usr/bin/docker:ro"]
    docker(
        "run",
        "-d",
        "--name",
        name,
        "--hostname",
        host,
        "--label",
        f"{LABEL}={prefix}",
        "--network",
        prefix,
        *RUN_OPTIONS,
        *extra,
        IMAGE,
        "/lib/systemd/systemd",
    )
    log(f"started {name}")


def link_exists(pid: int, interface: str) -> bool:
    return (
        run(
            ["nsenter", "-t", str(pid), "-n", "ip", "link", "show", interface], check=False
        ).returncode
        == 0
    )


def connect_rail(prefix: str, host_a: str, host_b: str) -> None:
    pid_a = container_pid(container_name(prefix, host_a))
    pid_b = container_pid(container_name(prefix, host_b))
    for interface in RAIL_INTERFACES:
        present = (link_exists(pid_a, interface), link_exists(pid_b, interface))
        if all(present):
            continue
        if any(present):
            raise LabError(f"rail link {interface} exists on one host only; run 'down' then 'up'")
        run(
            [
                "ip",
                "link",
                "add",
                interface,
                "netns",
                str(pid_a),
                "type",
                "veth",
                "peer",
                "name",
                interface,
                "netns",
                str(pid_b),
            ]
        )
        for pid in (pid_a, pid_b):
            run(["nsenter", "-t", str(pid), "-n", "ip", "link", "set", interface, "up"])
        log(f"rail {host_a}:{interface} <-> {host_b}:{interface}")


def wait_running(prefix: str, host: str) -> None:
    name = container_name(prefix, host)
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    state = ""
    while time.monotonic() < deadline:
        state = docker("exec", name, "systemctl", "is-system-running", check=False).stdout.strip()
        if state == "running":
            return
        if state == "degraded":
            break
        time.sleep(1)
    failed = docker("exec", name, "systemctl", "--failed", "--no-legend", check=False).stdout
    raise LabError(f"{name} is '{state or 'not answering'}', not running. Failed units:\n{failed}")


def ensure_network(prefix: str) -> None:
    """A network of the lab's own: on it, Docker's DNS resolves each host's container name, as a
    management network resolves a Spark's name (a front door reaches the pairs' APIs by it)."""
    if docker("network", "inspect", prefix, check=False).returncode == 0:
        return
    docker("network", "create", "--label", f"{LABEL}={prefix}", prefix)
    log(f"network {prefix}")


def rail_pairs(hosts: Sequence[str], rails: Sequence[str]) -> list[tuple[str, str]]:
    """The pairs joined by a rail: each 'A,B' of rails, or else the first two hosts."""
    if not rails:
        return [(hosts[0], hosts[1])] if len(hosts) >= 2 else []
    pairs = []
    for rail in rails:
        ends = tuple(rail.split(","))
        if len(ends) != 2 or ends[0] == ends[1] or not set(ends) <= set(hosts):
            raise LabError(f"--rail {rail!r}: give two different hosts of the lab as A,B ({hosts})")
        pairs.append((ends[0], ends[1]))
    used = [host for pair in pairs for host in pair]
    if len(used) != len(set(used)):
        raise LabError(f"a host is on two rails: {rails}")
    return pairs


def up(prefix: str, hosts: Sequence[str], docker_socket: bool, rails: Sequence[str] = ()) -> None:
    pairs = rail_pairs(hosts, rails)
    build_image(rebuild=False)
    ensure_network(prefix)
    for host in hosts:
        start_host(prefix, host, docker_socket)
    for host_a, host_b in pairs:
        connect_rail(prefix, host_a, host_b)
    for host in hosts:
        wait_running(prefix, host)
    log(f"lab '{prefix}' up: {', '.join(container_name(prefix, h) for h in hosts)}")


def lab_containers(prefix: str) -> list[str]:
    result = docker("ps", "-a", "--filter", f"label={LABEL}={prefix}", "--format", "{{.Names}}")
    return result.stdout.split()


def guest_containers(hosts: Sequence[str]) -> list[str]:
    """Containers started inside a lab host's network namespace (the service's, in the lab)."""
    ids = set(docker("inspect", "--format", "{{.Id}}", *hosts).stdout.split()) if hosts else set()
    modes = {f"container:{key}" for key in ids | set(hosts)}
    listing = docker("ps", "-a", "--format", "{{.Names}}").stdout.split()
    if not listing:
        return []
    inspected = docker("inspect", "--format", "{{.Name}} {{.HostConfig.NetworkMode}}", *listing)
    guests = []
    for line in inspected.stdout.splitlines():
        name, _, mode = line.strip().lstrip("/").partition(" ")
        if mode in modes:
            guests.append(name)
    return guests


def down(prefix: str, images: bool) -> None:
    names = lab_containers(prefix)
    guests = guest_containers(names)
    if guests:
        docker("rm", "-f", *guests)
        log(f"removed {', '.join(guests)} (they ran inside the lab hosts)")
    if names:
        docker("rm", "-f", *names)
        log(f"removed {', '.join(names)} (their rail links went with them)")
    else:
        log(f"no hosts of lab '{prefix}'")
    if docker("network", "inspect", prefix, check=False).returncode == 0:
        docker("network", "rm", prefix)
        log(f"removed network {prefix}")
    if images:
        remove_images()


def lab_images() -> list[str]:
    """The images the lab built that exist: every tag of the stand-in, then the base image."""
    listing = docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", STANDIN_REPOSITORY)
    standins = sorted({ref for ref in listing.stdout.split() if not ref.endswith(":<none>")})
    base = [IMAGE] if docker("image", "inspect", IMAGE, check=False).returncode == 0 else []
    return standins + base


def remove_images() -> None:
    """Remove the lab's images (stand-in tags first: they are built on the base image); none if a
    container still uses one of them. Quiet when there is none."""
    images = lab_images()
    if not images:
        return
    filters = [arg for image in images for arg in ("--filter", f"ancestor={image}")]
    users = docker("ps", "-a", *filters, "--format", "{{.Names}}").stdout.split()
    if users:
        raise LabError(f"{', '.join(images)} still used by {users}; no image removed")
    docker("rmi", *images)
    for image in images:
        log(f"removed image {image}")


def status(prefix: str) -> None:
    names = lab_containers(prefix)
    if not names:
        log(f"no hosts of lab '{prefix}'")
        return
    for name in names:
        pid = container_pid(name)
        state = "stopped"
        if pid:
            state = docker(
                "exec", name, "systemctl", "is-system-running", check=False
            ).stdout.strip()
        rail = [i for i in RAIL_INTERFACES if pid and link_exists(pid, i)]
        print(f"{name}: systemd {state}; rail links: {', '.join(rail) or 'none'}")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    image = sub.add_parser("image", help="build the lab's base image")
    image.add_argument("--rebuild", action="store_true", help="build even if up to date")
    sub.add_parser("standin-image", help="build the lab's stand-in vLLM serving image")
    for name in ("up", "down", "status"):
        cmd = sub.add_parser(name)
        cmd.add_argument(
            "--prefix",
            default=DEFAULT_PREFIX,
            help=f"container name prefix (default {DEFAULT_PREFIX})",
        )
        if name == "up":
            cmd.add_argument(
                "--host",
                action="append",
                dest="hosts",
                help="host name; repeat (default: spark-a, spark-b)",
            )
            cmd.add_argument(
                "--rail",
                action="append",
                dest="rails",
                default=[],
                metavar="A,B",
                help="join hosts A and B by a rail; repeat per pair (default: the first two hosts)",
            )
            cmd.add_argument(
                "--no-docker-socket",
                action="store_true",
                help="do not give the hosts the VM's Docker engine",
            )
        if name == "down":
            cmd.add_argument(
                "--images",
                action="store_true",
                help=f"also remove the images the lab built: {IMAGE} and every tag of "
                f"{STANDIN_REPOSITORY}",
            )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "image":
            build_image(args.rebuild)
        elif args.command == "up":
            hosts = tuple(args.hosts or DEFAULT_HOSTS)
            up(args.prefix, hosts, not args.no_docker_socket, args.rails)
        elif args.command == "standin-image":
            import standin_image

            print(standin_image.build())
        elif args.command == "down":
            down(args.prefix, args.images)
        else:
            status(args.prefix)
    except LabError as exc:
        print(f"[lab] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
