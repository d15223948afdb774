"""The inventory_check role's rules, applied on the controller to ``hostvars`` before any play of
the run connects to a node.

Every rule reads the value the roles would see: the inventory's (or ``-e``'s), templated now,
else the default its role's argument spec gives, else nothing. Each problem becomes one message
naming the variable, the hosts that carry it and the fix; identical problems on several hosts
are one message.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# --------------------------------------------------------------------------- role interfaces

# What an argument spec says about an option that matters here (descriptions are dropped).
_SPEC_KEYS = ("type", "elements", "choices", "default", "required", "options", "no_log", "aliases")
_SPEC_FILES = ("meta/argument_specs.yml", "meta/argument_specs.yaml")
# Where a role's own tasks give variables values at run time.
_TASK_DIRS = ("tasks", "handlers")
_SET_FACT = {"ansible.builtin.set_fact", "ansible.legacy.set_fact", "set_fact"}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _trimmed_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    trimmed = {key: spec[key] for key in _SPEC_KEYS if key in spec and key != "options"}
    if isinstance(spec.get("options"), Mapping):
        trimmed["options"] = {
            name: _trimmed_spec(sub or {}) for name, sub in spec["options"].items()
        }
    return trimmed


def _argument_specs(role: Path) -> dict[str, Any] | None:
    for name in _SPEC_FILES:
        path = role / name
        if path.is_file():
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            return data.get("argument_specs") or {}
    meta = role / "meta/main.yml"
    if meta.is_file():
        data = yaml.safe_load(meta.read_text(encoding="utf-8")) or {}
        if isinstance(data, Mapping) and "argument_specs" in data:
            return data["argument_specs"] or {}
    return None


def _names_set_by(node: Any, found: set[str]) -> None:
    """set_fact keys and register names anywhere in a task file's YAML."""
    if isinstance(node, Mapping):
        register = node.get("register")
        if isinstance(register, str) and _IDENTIFIER.match(register):
            found.add(register)
        for key, value in node.items():
            if key in _SET_FACT and isinstance(value, Mapping):
                found.update(
                    name
                    for name in value
                    if isinstance(name, str) and name != "cacheable" and _IDENTIFIER.match(name)
                )
            else:
                _names_set_by(value, found)
    elif isinstance(node, list):
        for item in node:
            _names_set_by(item, found)


def _runtime_names(role: Path) -> list[str]:
    found: set[str] = set()
    for directory in _TASK_DIRS:
        for path in sorted((role / directory).rglob("*.y*ml")):
            try:
                _names_set_by(yaml.safe_load(path.read_text(encoding="utf-8")), found)
            except yaml.YAMLError:
                continue  # ansible-lint and the role itself report a broken task file
    return sorted(found)


def role_interfaces(roles_path: str | Sequence[str]) -> dict[str, dict[str, Any]]:
    """For each role on the roles path with an argument spec (the first of a name wins, as for
    Ansible): its options over every entry point, with what their specs say, and the names its
    tasks set at run time (set_fact, register)."""
    paths = roles_path.split(":") if isinstance(roles_path, str) else list(roles_path)
    roles: dict[str, dict[str, Any]] = {}
    for base in paths:
        base_path = Path(str(base)).expanduser()
        if not base_path.is_dir():
            continue
        for role in sorted(base_path.iterdir()):
            if role.name in roles or not role.is_dir():
                continue
            specs = _argument_specs(role)
            if specs is None:
                continue
            options: dict[str, Any] = {}
            # main first: its spec of a shared option is the one the role documents.
            for entry in sorted(specs, key=lambda name: name != "main"):
                for name, spec in ((specs[entry] or {}).get("options") or {}).items():
                    options.setdefault(name, _trimmed_spec(spec or {}))
            roles[role.name] = {
                "path": str(role),
                "options": options,
                "runtime": _runtime_names(role),
            }
    return roles


def _role_of(name: str, roles: Mapping[str, Any]) -> str | None:
    """The role whose prefix (its name and '_') the variable carries; the longest one wins."""
    owners = [role for role in roles if name.startswith(role + "_")]
    return max(owners, key=len) if owners else None


# --------------------------------------------------------------------------- reading hostvars


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class Unreadable:
    """A value whose template failed on the controller."""

    error: str


def _plain(value: Any) -> Any:
    """Ansible's tagged and lazy containers as plain Python values."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    # Anything else is text to the roles; a template that failed (Ansible's marker of the
    # captured error) raises its error here.
    return str(value)


def _first_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 300 else text[:297] + "..."


@dataclass
class Finding:
    variable: str
    problem: str
    fix: str
    hosts: list[str] = field(default_factory=list)

    def render(self) -> str:
        return f"{self.variable} ({', '.join(self.hosts)}): {self.problem} Fix: {self.fix}"


class Findings:
    """Problems in the order found; the same problem on several hosts is one message."""

    def __init__(self) -> None:
        self._found: dict[tuple[str, str, str], Finding] = {}

    def add(self, variable: str, host: str | Iterable[str], problem: str, fix: str) -> None:
        hosts = [host] if isinstance(host, str) else list(host)
        finding = self._found.setdefault((variable, problem, fix), Finding(variable, problem, fix))
        finding.hosts.extend(name for name in hosts if name not in finding.hosts)

    def messages(self) -> list[str]:
        return [finding.render() for finding in self._found.values()]


@dataclass(frozen=True)
class Pair:
    name: str
    rank0: str
    rank1: str

    @property
    def hosts(self) -> list[str]:
        return [self.rank0, self.rank1]

    def peer(self, host: str) -> str:
        return self.rank1 if host == self.rank0 else self.rank0


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]+\s*", value):
        return int(value)
    return None


def _show(value: Any) -> str:
    if value is MISSING:
        return "unset"
    return repr(value)


class Inventory:
    """The hosts to check and what the roles will read for them."""

    def __init__(
        self,
        hostvars: Mapping[str, Any],
        hosts: Sequence[str],
        groups: Mapping[str, Sequence[str]],
        roles: Mapping[str, Any],
    ) -> None:
        self.hostvars = hostvars
        self.hosts = list(hosts)
        self.groups = {name: list(members) for name, members in groups.items()}
        self.roles = roles
        self.findings = Findings()
        self._values: dict[tuple[str, str], Any] = {}

    def names(self, host: str) -> list[str]:
        """The variables the inventory (and -e) set for the host, with Ansible's magic ones."""
        return list(self.hostvars[host].keys())

    def is_set(self, host: str, name: str) -> bool:
        return name in self.hostvars[host]

    def spec(self, name: str) -> Mapping[str, Any] | None:
        role = _role_of(name, self.roles)
        return self.roles[role]["options"].get(name) if role else None

    def get(self, host: str, name: str) -> Any:
        """The inventory's value (templated), else the spec's default, else MISSING; Unreadable
        where the template fails on the controller."""
        key = (host, name)
        if key not in self._values:
            variables = self.hostvars[host]
            if name in variables:
                try:
                    self._values[key] = _plain(variables[name])
                except Exception as error:  # whatever the template raised, it is the finding
                    self._values[key] = Unreadable(_first_line(error))
            else:
                spec = self.spec(name) or {}
                self._values[key] = _plain(spec["default"]) if "default" in spec else MISSING
        return self._values[key]

    def readable(self, host: str, name: str) -> bool:
        """False (and the finding made) when the value cannot be evaluated on the controller."""
        value = self.get(host, name)
        if isinstance(value, Unreadable):
            self.findings.add(
                name,
                host,
                f"cannot be evaluated on the controller before the play: {value.error}",
                "make what it reads exist on the controller (a file, an environment variable, a "
                "vault password) or correct the expression; facts of the run are not known yet.",
            )
            return False
        return True

    def text(self, host: str, name: str) -> str:
        value = self.get(host, name)
        if value is MISSING or value is None:
            return ""
        return value if isinstance(value, str) else str(value)

    def pair(self, host: str) -> Pair | None:
        """The host's pair when the inventory forms one (the pairs concern reports otherwise)."""
        name = self.get(host, "spark_pair_name")
        if not isinstance(name, str) or name not in self.groups:
            return None
        members = self.groups[name]
        if len(members) != 2 or host not in members:
            return None
        ranks = {member: _as_int(self.get(member, "spark_pair_rank")) for member in members}
        if sorted(rank for rank in ranks.values() if rank is not None) != [0, 1]:
            return None
        rank0 = next(member for member, rank in ranks.items() if rank == 0)
        return Pair(name, rank0, next(member for member in members if member != rank0))

    def pairs(self) -> list[Pair]:
        found: dict[str, Pair] = {}
        for host in self.hosts:
            pair = self.pair(host)
            if pair is not None:
                found.setdefault(pair.name, pair)
        return list(found.values())

    def where(self, host: str, kind: str = "group") -> str:
        """Where the inventory sets a pair's (or a host's) variables, for the fixes."""
        pair = self.pair(host)
        if kind == "host":
            return f"host_vars/{host}/"
        return f"group_vars/{pair.name}/" if pair else "group_vars/<pair>/"


def scope(
    hostvars: Mapping[str, Any], play_hosts: Sequence[str], groups: Mapping[str, Sequence[str]]
) -> list[str]:
    """The play's hosts and, for each, the other host of its pair (a pair is checked whole), in
    inventory order."""
    hosts: list[str] = []
    for host in play_hosts:
        if host not in hosts:
            hosts.append(host)
        try:
            name = hostvars[host].get("spark_pair_name", "")
        except Exception:  # the pairs concern reports a spark_pair_name that does not evaluate
            continue
        members = list(groups.get(str(name), []))
        if len(members) == 2 and host in members:
            hosts.extend(member for member in members if member not in hosts)
    order = {name: index for index, name in enumerate(groups.get("all", []))}
    return sorted(hosts, key=lambda name: (order.get(name, len(order)), hosts.index(name)))


# --------------------------------------------------------------------------- the concerns

_API_KEY = re.compile(r"^[A-Za-z0-9._~+/=-]+$")
_API_KEY_MIN = 16
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_RELEASE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
SPECULATIVE_METHODS = ("mtp", "dflash", "none")


def check_pairs(inv: Inventory) -> None:
    """spark_pair: each host names a group of exactly two hosts, ranks 0 and 1."""
    fix_name = (
        "set spark_pair_name to the inventory group that holds this host and its peer, in "
        "group_vars/<pair>/pair.yml."
    )
    for host in inv.hosts:
        if not inv.readable(host, "spark_pair_name") or not inv.readable(host, "spark_pair_rank"):
            continue
        name = inv.get(host, "spark_pair_name")
        if name is MISSING or name in ("", None):
            inv.findings.add("spark_pair_name", host, "is not set.", fix_name)
        elif not isinstance(name, str) or name not in inv.groups:
            inv.findings.add(
                "spark_pair_name", host, f"is {name!r}, which is no inventory group.", fix_name
            )
        elif len(inv.groups[name]) != 2 or host not in inv.groups[name]:
            inv.findings.add(
                "spark_pair_name",
                host,
                f"is {name!r}, whose group holds {inv.groups[name]}: a pair's group holds "
                "exactly its two hosts, this one among them.",
                f"put this host and its peer (only) in group {name} of hosts.yml, or {fix_name}",
            )
        rank = inv.get(host, "spark_pair_rank")
        if _as_int(rank) not in (0, 1):
            inv.findings.add(
                "spark_pair_rank",
                host,
                f"is {_show(rank)}.",
                "set spark_pair_rank: 0 on the API node and 1 on the headless node, per host in "
                "hosts.yml.",
            )
    seen: set[str] = set()
    for host in inv.hosts:
        name = inv.get(host, "spark_pair_name")
        if not isinstance(name, str) or name in seen or len(inv.groups.get(name, [])) != 2:
            continue
        seen.add(name)
        members = inv.groups[name]
        ranks = [_as_int(inv.get(member, "spark_pair_rank")) for member in members]
        if all(rank in (0, 1) for rank in ranks) and ranks[0] == ranks[1]:
            inv.findings.add(
                "spark_pair_rank",
                members,
                f"is {ranks[0]} on both nodes of pair {name}.",
                "one node needs spark_pair_rank 0 (API) and the other 1 (headless), in hosts.yml.",
            )


def _network(subnet: Any) -> ipaddress.IPv4Network | None:
    try:
        network = ipaddress.ip_network(str(subnet), strict=True)
    except ValueError:
        return None
    return network if isinstance(network, ipaddress.IPv4Network) and "/" in str(subnet) else None


def _usable(network: ipaddress.IPv4Network, address: ipaddress.IPv4Address) -> bool:
    if address not in network:
        return False
    if network.prefixlen >= 31:
        return True
    return address not in (network.network_address, network.broadcast_address)


def _twins(inv: Inventory, host: str) -> list[tuple[str, ipaddress.IPv4Network]] | None:
    """The host's two twins as (interface, network) when well formed; findings otherwise."""
    twins = inv.get(host, "rail_network_twins")
    where = inv.where(host)
    shape_ok = (
        isinstance(twins, list)
        and len(twins) == 2
        and all(isinstance(twin, Mapping) for twin in twins)
        and all(isinstance(twin.get("interface"), str) and twin.get("interface") for twin in twins)
        and len({twin["interface"] for twin in twins}) == 2
    )
    if not shape_ok:
        inv.findings.add(
            "rail_network_twins",
            host,
            f"is {_show(twins)}: it must list the two port twins of the rail, each "
            "{interface, subnet} with an interface of its own.",
            f"set it once per pair in {where}rail_network.yml, e.g. [{{interface: enp1s0f1np1, "
            "subnet: 192.168.100.0/24}, {interface: enP2p1s0f1np1, subnet: 192.168.101.0/24}].",
        )
        return None
    result = []
    for index, twin in enumerate(twins):
        network = _network(twin.get("subnet"))
        if network is None:
            inv.findings.add(
                f"rail_network_twins[{index}].subnet",
                host,
                f"is {_show(twin.get('subnet', MISSING))} (twin {twin['interface']}): not an IPv4 "
                "network in CIDR form without host bits.",
                f"give the twin a private IPv4 network such as 192.168.10{index}.0/24 in "
                f"{where}rail_network.yml.",
            )
            return None
        result.append((str(twin["interface"]), network))
    if result[0][1].overlaps(result[1][1]):
        inv.findings.add(
            "rail_network_twins",
            host,
            f"gives both twins overlapping subnets ({result[0][1]} on {result[0][0]}, "
            f"{result[1][1]} on {result[1][0]}).",
            f"give each twin a subnet of its own in {where}rail_network.yml.",
        )
        return None
    return result


def _addresses(
    inv: Inventory, host: str, twins: list[tuple[str, ipaddress.IPv4Network]]
) -> dict[str, str] | None:
    addresses = inv.get(host, "rail_network_addresses")
    where = inv.where(host, "host")
    interfaces = [interface for interface, _ in twins]
    if not isinstance(addresses, Mapping):
        inv.findings.add(
            "rail_network_addresses",
            host,
            f"is {_show(addresses)}, not a mapping of twin interface to IPv4 address.",
            f"set {{{interfaces[0]}: <IPv4>, {interfaces[1]}: <IPv4>}} in {where}rail_network.yml.",
        )
        return None
    good: dict[str, str] = {}
    for interface in addresses:
        if interface not in interfaces:
            inv.findings.add(
                f"rail_network_addresses[{interface!r}]",
                host,
                f"names no twin of rail_network_twins ({', '.join(interfaces)}).",
                f"key each address by a twin's interface in {where}rail_network.yml.",
            )
    for interface, network in twins:
        raw = addresses.get(interface, MISSING)
        variable = f"rail_network_addresses[{interface!r}]"
        fix = (
            f"set it to a host address inside {network} (no prefix length), different from the "
            f"peer's, in {where}rail_network.yml."
        )
        if raw is MISSING or raw in ("", None):
            inv.findings.add(variable, host, f"is unset: twin {interface} has no address.", fix)
            continue
        try:
            address = ipaddress.IPv4Address(str(raw))
        except ValueError:
            inv.findings.add(variable, host, f"is {raw!r}, not a plain IPv4 address.", fix)
            continue
        if not _usable(network, address):
            inv.findings.add(
                variable,
                host,
                f"is {address}, outside the usable addresses of twin {interface}'s subnet "
                f"{network}.",
                fix,
            )
            continue
        good[interface] = str(address)
    return good if len(good) == len(twins) else None


def check_rail(inv: Inventory) -> None:
    """rail_network: twins and addresses of every host, both ends of a pair agreeing, and no
    subnet shared by two pairs."""
    plans: dict[str, tuple[list[tuple[str, ipaddress.IPv4Network]], dict[str, str] | None]] = {}
    for host in inv.hosts:
        names = ("rail_network_twins", "rail_network_addresses", "rail_network_mtu")
        if not all([inv.readable(host, name) for name in names]):
            continue
        twins = _twins(inv, host)
        if twins is not None:
            plans[host] = (twins, _addresses(inv, host, twins))
        mtu = inv.get(host, "rail_network_mtu")
        allowed = inv.get(host, "rail_network_allowed_mtus")
        allowed_mtus = [_as_int(item) for item in allowed] if isinstance(allowed, list) else []
        if _as_int(mtu) is None or _as_int(mtu) not in allowed_mtus:
            inv.findings.add(
                "rail_network_mtu",
                host,
                f"is {_show(mtu)}; the rail takes {' or '.join(map(str, allowed_mtus))}.",
                f"set one of those, the same on both hosts, in {inv.where(host)}rail_network.yml.",
            )
    for pair in inv.pairs():
        a, b = pair.hosts
        if a in plans and b in plans:
            twins_a, twins_b = plans[a][0], plans[b][0]
            if twins_a != twins_b:
                inv.findings.add(
                    "rail_network_twins",
                    pair.hosts,
                    f"differ between the nodes of pair {pair.name} ({_describe(twins_a)} on {a}, "
                    f"{_describe(twins_b)} on {b}): both ends of a twin share its subnet.",
                    f"set rail_network_twins once, in group_vars/{pair.name}/rail_network.yml.",
                )
            else:
                addresses_a, addresses_b = plans[a][1], plans[b][1]
                for interface, network in twins_a:
                    if (
                        addresses_a
                        and addresses_b
                        and addresses_a[interface] == addresses_b[interface]
                    ):
                        inv.findings.add(
                            f"rail_network_addresses[{interface!r}]",
                            pair.hosts,
                            f"is {addresses_a[interface]} on both nodes of pair {pair.name}.",
                            f"give each node its own address in {network} (e.g. .10 on rank 0, "
                            ".11 on rank 1), in host_vars/<host>/rail_network.yml.",
                        )
        mtus = [_as_int(inv.get(host, "rail_network_mtu")) for host in pair.hosts]
        if None not in mtus and mtus[0] != mtus[1]:
            inv.findings.add(
                "rail_network_mtu",
                pair.hosts,
                f"is {mtus[0]} on {a} but {mtus[1]} on {b}: an MTU mismatch breaks RoCE "
                "(IBV_WC_RETRY_EXC_ERR).",
                f"set one rail_network_mtu in group_vars/{pair.name}/rail_network.yml.",
            )
    _pairs_share_no_subnet(inv, plans)


def _describe(twins: list[tuple[str, ipaddress.IPv4Network]]) -> str:
    return ", ".join(f"{interface} {network}" for interface, network in twins)


def _pairs_share_no_subnet(
    inv: Inventory, plans: Mapping[str, tuple[list[tuple[str, ipaddress.IPv4Network]], Any]]
) -> None:
    """Every pair of the inventory (not only those in the play) against each other."""
    everyone = Inventory(inv.hostvars, _all_hosts(inv), inv.groups, inv.roles)
    subnets: list[tuple[Pair, str, ipaddress.IPv4Network]] = []
    for pair in everyone.pairs():
        host = pair.rank0
        twins: list[tuple[str, ipaddress.IPv4Network]] | None
        if host in plans:
            twins = plans[host][0]
        else:
            quiet = Inventory(inv.hostvars, [host], inv.groups, inv.roles)
            twins = _twins(quiet, host) if quiet.readable(host, "rail_network_twins") else None
        subnets.extend((pair, interface, network) for interface, network in twins or [])
    checked = {pair.name for pair in inv.pairs()}
    for index, (pair, interface, network) in enumerate(subnets):
        for other, other_interface, other_network in subnets[:index]:
            if other.name == pair.name or not network.overlaps(other_network):
                continue
            if pair.name not in checked and other.name not in checked:
                continue
            inv.findings.add(
                "rail_network_twins",
                pair.hosts,
                f"gives twin {interface} of pair {pair.name} the subnet {network}, which overlaps "
                f"{other_network} of pair {other.name} ({other_interface}).",
                f"give every pair subnets of its own, in group_vars/{pair.name}/rail_network.yml.",
            )


def _all_hosts(inv: Inventory) -> list[str]:
    group = inv.get(inv.hosts[0], "spark_pair_all_group") if inv.hosts else MISSING
    members = inv.groups.get(group if isinstance(group, str) else "dualspark", [])
    return list(dict.fromkeys([*inv.hosts, *members]))


def _rail_addresses(inv: Inventory, host: str) -> list[str]:
    addresses = inv.get(host, "rail_network_addresses")
    if not isinstance(addresses, Mapping):
        return []
    return [str(value) for value in addresses.values() if value not in ("", None)]


def check_rendezvous(inv: Inventory) -> None:
    """vllm_tp2_service: an explicit rendezvous address is one of rank 0's rail addresses, an
    explicit node address one of the node's own."""
    for host in inv.hosts:
        pair = inv.pair(host)
        if pair is None:
            continue
        if inv.is_set(host, "vllm_tp2_service_master_address") and inv.readable(
            host, "vllm_tp2_service_master_address"
        ):
            value = inv.text(host, "vllm_tp2_service_master_address").strip()
            allowed = _rail_addresses(inv, pair.rank0)
            if value not in allowed:
                inv.findings.add(
                    "vllm_tp2_service_master_address",
                    host,
                    f"is {value!r}, not a rail address of {pair.rank0}, rank 0 of pair "
                    f"{pair.name} ({', '.join(allowed) or 'none set'}): rank 1 would look for the "
                    "rendezvous where rank 0 does not listen.",
                    "remove it (rank 0's first rail address is the default) or set it to one of "
                    f"{pair.rank0}'s rail_network_addresses.",
                )
        if inv.is_set(host, "vllm_tp2_service_node_address") and inv.readable(
            host, "vllm_tp2_service_node_address"
        ):
            value = inv.text(host, "vllm_tp2_service_node_address").strip()
            own = _rail_addresses(inv, host)
            if value not in own:
                inv.findings.add(
                    "vllm_tp2_service_node_address",
                    host,
                    f"is {value!r}, not one of this node's rail addresses "
                    f"({', '.join(own) or 'none set'}).",
                    "remove it (the node's first rail address is the default) or set it to one of "
                    f"rail_network_addresses in host_vars/{host}/.",
                )


def check_image(inv: Inventory) -> None:
    """container_runtime: the image pinned by a well-formed digest (or image ID), the same on
    both nodes of a pair."""
    for host in inv.hosts:
        names = (
            "container_runtime_image",
            "container_runtime_image_digest",
            "container_runtime_pin",
        )
        if not all([inv.readable(host, name) for name in names]):
            continue
        image = inv.text(host, "container_runtime_image")
        digest = inv.text(host, "container_runtime_image_digest").strip()
        pin = inv.get(host, "container_runtime_pin")
        if pin not in ("repo_digest", "image_id"):
            inv.findings.add(
                "container_runtime_pin",
                host,
                f"is {_show(pin)}.",
                "use repo_digest (a registry's manifest digest) or image_id (a local image's ID, "
                "for an image that never went through a registry).",
            )
            continue
        if "@" in image:
            inv.findings.add(
                "container_runtime_image",
                host,
                f"is {image!r}: it carries a digest, and the role appends the pinned one.",
                "set the repository and tag here and the digest in container_runtime_image_digest.",
            )
        if not _DIGEST.match(digest):
            what = "is empty" if not digest else f"is {digest!r}, not sha256:<64 lowercase hex>"
            if pin == "image_id":
                fix = (
                    f"set it to the ID of the local image {image} (`docker image inspect --format "
                    "'{{.Id}}' <image>`, sha256:<64 hex>), in the inventory."
                )
            else:
                fix = (
                    f"set it to the manifest digest of {image} (`docker buildx imagetools inspect "
                    "<image>`, sha256:<64 hex>) in group_vars/all/container_runtime.yml; a tag "
                    "alone can move."
                )
            inv.findings.add("container_runtime_image_digest", host, f"{what}.", fix)
    for pair in inv.pairs():
        a, b = pair.hosts
        for name in ("container_runtime_image_digest", "container_runtime_pin"):
            values = [inv.get(host, name) for host in pair.hosts]
            if any(isinstance(value, Unreadable) for value in values) or values[0] == values[1]:
                continue
            inv.findings.add(
                name,
                pair.hosts,
                f"differs between the nodes of pair {pair.name} ({_show(values[0])} on {a}, "
                f"{_show(values[1])} on {b}): both must end with the same image.",
                f"set it once, in group_vars/{pair.name}/ or group_vars/all/.",
            )


def check_api_key(inv: Inventory) -> None:
    """vllm_tp2_service: rank 0 serves the API, with a key systemd and docker read alike. The
    key's value never appears in a message."""
    for host in inv.hosts:
        pair = inv.pair(host)
        if pair is None or pair.rank0 != host or not inv.readable(host, "vllm_tp2_service_api_key"):
            continue
        key = inv.text(host, "vllm_tp2_service_api_key")
        fix = (
            "give it 16 or more of A-Za-z0-9 . _ ~ + / = - from ansible-vault or the controller's "
            "environment (inventory/production reads DUALSPARK_API_KEY), never from the repository."
        )
        serves = " (the host is rank 0 of its pair and serves the API with it)."
        if not key:
            inv.findings.add("vllm_tp2_service_api_key", host, "is empty" + serves, fix)
        elif not _API_KEY.match(key):
            inv.findings.add(
                "vllm_tp2_service_api_key",
                host,
                "holds characters other than A-Za-z0-9 . _ ~ + / = - (blanks, quotes, "
                "backslashes), which systemd and docker read differently in the env file" + serves,
                fix,
            )
        elif len(key) < _API_KEY_MIN:
            inv.findings.add(
                "vllm_tp2_service_api_key",
                host,
                f"has {len(key)} characters, fewer than {_API_KEY_MIN}" + serves,
                fix,
            )


def check_model(inv: Inventory) -> None:
    """model_weights: the checkpoint (and a drafter, when set) pinned to a commit, the same on
    both nodes of a pair."""
    names = (
        "model_weights_repo_id",
        "model_weights_revision",
        "model_weights_draft_repo_id",
        "model_weights_draft_revision",
        "model_weights_source",
        "model_weights_stand_in_directory",
        "model_weights_draft_stand_in_directory",
    )
    for host in inv.hosts:
        if not all([inv.readable(host, name) for name in names]):
            continue
        repo = inv.text(host, "model_weights_repo_id")
        revision = inv.text(host, "model_weights_revision")
        if not _REPO_ID.match(repo):
            inv.findings.add(
                "model_weights_repo_id",
                host,
                f"is {repo!r}, not a hub repository owner/name.",
                "set the hub repository as owner/name, in group_vars/all/model_weights.yml as in "
                "inventory/production.",
            )
        if not _COMMIT.match(revision):
            inv.findings.add(
                "model_weights_revision",
                host,
                ("is empty" if not revision else f"is {revision!r}")
                + ": the checkpoint must be pinned to a commit (a branch would let it change "
                "under the service).",
                f"set the 40-digit lowercase commit id of {repo or 'the repository'} you validated "
                "(the hub's commit history lists them) in group_vars/all/model_weights.yml.",
            )
        draft_repo = inv.text(host, "model_weights_draft_repo_id")
        draft_revision = inv.text(host, "model_weights_draft_revision")
        if draft_repo or draft_revision:
            fix = (
                "set model_weights_draft_repo_id to the drafter's owner/name (a repository other "
                "than model_weights_repo_id) and model_weights_draft_revision to its 40-digit "
                "commit id, or leave both empty for no drafter."
            )
            if not _REPO_ID.match(draft_repo) or draft_repo == repo:
                inv.findings.add(
                    "model_weights_draft_repo_id",
                    host,
                    f"is {draft_repo!r}"
                    + (
                        ", the checkpoint's own repository."
                        if draft_repo == repo
                        else ", not a hub repository owner/name."
                    ),
                    fix,
                )
            if not _COMMIT.match(draft_revision):
                inv.findings.add(
                    "model_weights_draft_revision",
                    host,
                    ("is empty" if not draft_revision else f"is {draft_revision!r}")
                    + f" while a drafter is set ({draft_repo or 'model_weights_draft_repo_id'}): "
                    "it must be pinned to a commit.",
                    fix,
                )
        if inv.get(host, "model_weights_source") == "stand_in_directory":
            for name, needed in (
                ("model_weights_stand_in_directory", True),
                ("model_weights_draft_stand_in_directory", bool(draft_repo)),
            ):
                if needed and not inv.text(host, name):
                    inv.findings.add(
                        name,
                        host,
                        "is empty while model_weights_source is stand_in_directory.",
                        "name the stand-in directory (files/ and api.json, made by "
                        "lab/make_checkpoint.py) on the source node, or use "
                        "model_weights_source: hub.",
                    )
    for pair in inv.pairs():
        for name in (
            "model_weights_repo_id",
            "model_weights_revision",
            "model_weights_draft_repo_id",
            "model_weights_draft_revision",
        ):
            values = [inv.get(host, name) for host in pair.hosts]
            if any(isinstance(value, Unreadable) for value in values) or values[0] == values[1]:
                continue
            inv.findings.add(
                name,
                pair.hosts,
                f"differs between the nodes of pair {pair.name} ({_show(values[0])} on "
                f"{pair.rank0}, {_show(values[1])} on {pair.rank1}): both nodes load one "
                "checkpoint.",
                f"set it once, in group_vars/{pair.name}/ or group_vars/all/.",
            )


# The overlay's settings (files/vllm_dualpath/src/vllm_dualpath/settings.py): each
# DUALPATH_* variable with the role variable that writes it.
_OVERLAY_SETTINGS = {
    "DUALPATH_ENABLED": "dualpath_overlay_enabled",
    "DUALPATH_SMALL_M_MAX": "dualpath_overlay_small_m_max",
    "DUALPATH_LARGE_M_MIN": "dualpath_overlay_large_m_min",
    "DUALPATH_STRICT": "dualpath_overlay_strict",
    "DUALPATH_CHANNEL_SCALE": "dualpath_overlay_channel_scale",
    "DUALPATH_UNPACK_AHEAD": "dualpath_overlay_unpack_ahead",
    "DUALPATH_UNPACK_AHEAD_MIN_M": "dualpath_overlay_unpack_ahead_min_m",
    "DUALPATH_UNPACK_AHEAD_DEPTH": "dualpath_overlay_unpack_ahead_depth",
    "DUALPATH_STATS_DIR": "vllm_tp2_service_container_overlay_stats_dir",
}
_FLAGS = ("DUALPATH_ENABLED", "DUALPATH_STRICT", "DUALPATH_UNPACK_AHEAD")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_MAX_UNPACK_AHEAD_DEPTH = 3
_CHANNEL_SCALES = ("epilogue", "unpack")


def _overlay_env(inv: Inventory, host: str) -> dict[str, tuple[str, str]] | None:
    """Each DUALPATH_* setting the service's env file will carry: (value, where it comes from),
    in the order the service combines them (the overlay's variables, the overlay's extra env,
    the service's extra env)."""
    env: dict[str, tuple[str, str]] = {}
    for setting, name in _OVERLAY_SETTINGS.items():
        if not inv.readable(host, name):
            return None
        value = inv.get(host, name)
        if value is MISSING:
            continue
        if setting in _FLAGS and isinstance(value, bool):
            value = "1" if value else "0"
        env[setting] = ("" if value is None else str(value), name)
    for extra in ("dualpath_overlay_extra_env", "vllm_tp2_service_extra_env"):
        if not inv.readable(host, extra):
            return None
        values = inv.get(host, extra)
        if isinstance(values, Mapping):
            for key, value in values.items():
                if str(key).startswith("DUALPATH_"):
                    env[str(key)] = ("" if value is None else str(value), f"{extra}[{key!r}]")
    return env


class _OverlaySettings:
    """One host's DUALPATH_* settings, read the way the overlay reads them."""

    FIX = (
        "set it in group_vars/all/dualpath_overlay.yml within the overlay's ranges "
        "(files/vllm_dualpath/README.md)."
    )

    def __init__(self, inv: Inventory, host: str, env: dict[str, tuple[str, str]]) -> None:
        self.inv, self.host, self.env = inv, host, env

    def source(self, setting: str) -> str:
        return self.env.get(setting, ("", _OVERLAY_SETTINGS.get(setting, setting)))[1]

    def raw(self, setting: str) -> str:
        return self.env.get(setting, ("", ""))[0].strip()

    def flag(self, setting: str, default: bool) -> bool:
        value = self.raw(setting)
        if not value:
            return default
        if value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        self.inv.findings.add(
            self.source(setting), self.host, f"is {value!r}: {setting} takes a boolean.", self.FIX
        )
        return default

    def count(self, setting: str, default: int) -> int | None:
        value = self.raw(setting)
        if not value:
            return default
        number = _as_int(value)
        if number is None or number < 0:
            self.inv.findings.add(
                self.source(setting),
                self.host,
                f"is {value!r}: {setting} takes a whole number, 0 or more.",
                self.FIX,
            )
            return None
        return number


def check_overlay(inv: Inventory) -> None:
    """dualpath_overlay: the settings the overlay reads at start (settings.load), so a bad one
    never gets as far as a vLLM that refuses to start."""
    for host in inv.hosts:
        env = _overlay_env(inv, host)
        if env is None:
            continue
        settings = _OverlaySettings(inv, host, env)
        if not settings.flag("DUALPATH_ENABLED", True):
            continue  # the overlay reads nothing else when it is off
        small = settings.count("DUALPATH_SMALL_M_MAX", 20)
        large = settings.count("DUALPATH_LARGE_M_MIN", 1024)
        if small is not None and large is not None and large <= small:
            inv.findings.add(
                settings.source("DUALPATH_LARGE_M_MIN"),
                host,
                f"is {large}, not above {settings.source('DUALPATH_SMALL_M_MAX')} ({small}): "
                "the overlay refuses to start unless DUALPATH_LARGE_M_MIN > DUALPATH_SMALL_M_MAX.",
                "keep dualpath_overlay_small_m_max below dualpath_overlay_large_m_min (defaults "
                "20 and 1024), in group_vars/all/dualpath_overlay.yml.",
            )
        settings.count("DUALPATH_UNPACK_AHEAD_MIN_M", 1024)
        settings.count("DUALPATH_REPORT_INTERVAL_S", 60)
        depth = settings.count("DUALPATH_UNPACK_AHEAD_DEPTH", 1)
        if depth is not None and not 1 <= depth <= _MAX_UNPACK_AHEAD_DEPTH:
            inv.findings.add(
                settings.source("DUALPATH_UNPACK_AHEAD_DEPTH"),
                host,
                f"is {depth}: DUALPATH_UNPACK_AHEAD_DEPTH is 1 to {_MAX_UNPACK_AHEAD_DEPTH} "
                "layers.",
                _OverlaySettings.FIX,
            )
        settings.flag("DUALPATH_STRICT", False)
        settings.flag("DUALPATH_UNPACK_AHEAD", True)
        scale = settings.raw("DUALPATH_CHANNEL_SCALE")
        if scale and scale.lower() not in _CHANNEL_SCALES:
            inv.findings.add(
                settings.source("DUALPATH_CHANNEL_SCALE"),
                host,
                f"is {scale!r}: DUALPATH_CHANNEL_SCALE is epilogue or unpack.",
                _OverlaySettings.FIX,
            )
        stats = settings.raw("DUALPATH_STATS_DIR")
        if stats and not stats.startswith("/"):
            inv.findings.add(
                settings.source("DUALPATH_STATS_DIR"),
                host,
                f"is {stats!r}: DUALPATH_STATS_DIR must be an absolute path (every vLLM process "
                "writes there from a working directory of its own).",
                "give an absolute path in the container.",
            )


def check_service(inv: Inventory) -> None:
    """vllm_tp2_service: speculative decoding, draining and ports."""
    for host in inv.hosts:
        names = (
            "vllm_tp2_service_speculative_method",
            "vllm_tp2_service_drain_timeout_s",
            "vllm_tp2_service_port",
            "vllm_tp2_service_master_port",
            "model_weights_draft_repo_id",
        )
        if not all([inv.readable(host, name) for name in names]):
            continue
        method = inv.get(host, "vllm_tp2_service_speculative_method")
        if method not in SPECULATIVE_METHODS:
            inv.findings.add(
                "vllm_tp2_service_speculative_method",
                host,
                f"is {_show(method)}.",
                "use mtp (the model's own heads, the default), dflash (the drafter model_weights "
                "stages) or none.",
            )
        elif method == "dflash":
            has_path = inv.is_set(host, "vllm_tp2_service_dflash_path") and bool(
                inv.readable(host, "vllm_tp2_service_dflash_path")
                and inv.text(host, "vllm_tp2_service_dflash_path")
            )
            if not inv.text(host, "model_weights_draft_repo_id") and not has_path:
                inv.findings.add(
                    "vllm_tp2_service_speculative_method",
                    host,
                    "is dflash, but no drafter is staged (model_weights_draft_repo_id is empty).",
                    "set model_weights_draft_repo_id and model_weights_draft_revision (or "
                    "vllm_tp2_service_dflash_path), or use mtp.",
                )
        drain = inv.get(host, "vllm_tp2_service_drain_timeout_s")
        seconds = _as_int(drain)
        if seconds is None or seconds < 1:
            inv.findings.add(
                "vllm_tp2_service_drain_timeout_s",
                host,
                f"is {_show(drain)}: vLLM's --shutdown-timeout below 1 aborts every request in "
                "flight on a stop.",
                "give the seconds a request may take to finish (1 or more; default 120).",
            )
        for name in ("vllm_tp2_service_port", "vllm_tp2_service_master_port"):
            port = _as_int(inv.get(host, name))
            if port is None or not 1 <= port <= 65535:
                inv.findings.add(
                    name,
                    host,
                    f"is {_show(inv.get(host, name))}, not a TCP port.",
                    "use a free port from 1 to 65535.",
                )


def check_rollback(inv: Inventory) -> None:
    """rolling_update: rollback.yml returns to a release named on the command line."""
    for host in inv.hosts:
        if not inv.readable(host, "rolling_update_release"):
            continue
        release = inv.text(host, "rolling_update_release")
        fix = (
            "name the release: -e rolling_update_release=<release>, a directory name under "
            "releases/ of dualpath_overlay_root on the nodes (e.g. 0.1.0-9eb9a229b23d)."
        )
        if not release:
            inv.findings.add("rolling_update_release", host, "is empty.", fix)
        elif not _RELEASE.match(release) or ".." in release:
            inv.findings.add(
                "rolling_update_release", host, f"is {release!r}, not a release name.", fix
            )


_SECRET = re.compile(r"(key|token|password|secret)$")
# Options a concern above checks with a message of its own; the spec's would say it again.
_DEDICATED = {
    "spark_pair_name",
    "spark_pair_rank",
    "rail_network_twins",
    "rail_network_addresses",
    "rail_network_mtu",
    "container_runtime_pin",
    "container_runtime_image_digest",
    "dualpath_overlay_channel_scale",
    "dualpath_overlay_unpack_ahead_depth",
}


def check_options(inv: Inventory) -> None:
    """Every role option the inventory sets, against its argument spec (type, choices,
    elements), as the role's own validation would at its start: here before any role runs."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    for host in inv.hosts:
        for name in inv.names(host):
            spec = inv.spec(name)
            if spec is None or name in _DEDICATED:
                continue
            value = inv.get(host, name)
            if isinstance(value, Unreadable) or value is MISSING:
                continue  # a value from a fact of the run; the rule that needs it says so
            checked = {key: spec[key] for key in spec if key not in ("required", "default")}
            result = ArgumentSpecValidator({name: checked}).validate({name: value})
            for error in result.errors:
                problem = str(error) if not _SECRET.search(name) else "does not fit its type."
                inv.findings.add(
                    name,
                    host,
                    problem.rstrip(".") + ".",
                    f"fix the value ({_role_of(name, inv.roles)}'s README lists the variable "
                    "and its values).",
                )


CONCERNS: dict[str, Callable[[Inventory], None]] = {
    "pairs": check_pairs,
    "rail": check_rail,
    "rendezvous": check_rendezvous,
    "image": check_image,
    "api_key": check_api_key,
    "model": check_model,
    "overlay": check_overlay,
    "service": check_service,
    "rollback": check_rollback,
    "options": check_options,
}


def rule(
    hostvars: Mapping[str, Any],
    concern: str,
    hosts: Sequence[str],
    groups: Mapping[str, Sequence[str]],
    roles: Mapping[str, Any],
) -> list[str]:
    """The messages of one concern's rules for the hosts (empty when all hold)."""
    if concern not in CONCERNS:
        raise ValueError(f"inventory_check has no concern {concern!r} ({', '.join(CONCERNS)})")
    inv = Inventory(hostvars, hosts, groups, roles)
    CONCERNS[concern](inv)
    return inv.findings.messages()


def unknown_variables(
    hostvars: Mapping[str, Any],
    hosts: Sequence[str],
    roles: Mapping[str, Any],
    allowed: Sequence[str] = (),
) -> list[str]:
    """Variables that carry a role's prefix but are neither an option of that role (any entry
    point) nor a name its tasks set at run time, with the nearest known name."""
    inv = Inventory(hostvars, hosts, {}, roles)
    every_known = sorted(
        {
            known
            for interface in roles.values()
            for known in (*interface["options"], *interface["runtime"])
        }
    )
    for host in hosts:
        for name in inv.names(host):
            if name in allowed:
                continue
            role = _role_of(name, roles)
            if role is None:
                _report_misspelt_prefix(inv, host, name, every_known)
                continue
            interface = roles[role]
            if name in interface["options"] or name in interface["runtime"]:
                continue
            known = [*interface["options"], *interface["runtime"]]
            nearest = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = (
                f"did you mean {nearest[0]}? Rename it"
                if nearest
                else f"check {role}'s README for its variables and rename"
            )
            inv.findings.add(
                name,
                host,
                f"carries the prefix of role {role} but is none of its options "
                f"(meta/argument_specs.yml): no role reads it, so it changes nothing.",
                f"{hint} or remove it (names the role must accept anyway go in "
                "inventory_check_allowed_variables).",
            )
    return inv.findings.messages()


# How alike a name without any role's prefix must be to a role's variable to count as its typo
# (difflib's ratio): one swapped or missing letter in a name of 15 or more characters is above
# it; a site's own names (lab_cache, site_note) are far below any role's variable.
MISSPELT_PREFIX_SIMILARITY = 0.9


def _report_misspelt_prefix(inv: Inventory, host: str, name: str, known: Sequence[str]) -> None:
    """A name one slip away from a role's variable, the slip in the prefix (rail_netwrok_mtu)."""
    nearest = difflib.get_close_matches(name, known, n=1, cutoff=MISSPELT_PREFIX_SIMILARITY)
    if not nearest:
        return
    inv.findings.add(
        name,
        host,
        f"carries no role's prefix but is a near miss of {nearest[0]}: no role reads it, so it "
        "changes nothing.",
        f"did you mean {nearest[0]}? Rename it, or, if it is the site's own, list it in "
        "inventory_check_allowed_variables.",
    )


def warn(messages: Sequence[str]) -> int:
    """Show each message as an Ansible warning; the number of them."""
    from ansible.utils.display import Display

    display = Display()
    for message in messages:
        display.warning(str(message))
    return len(messages)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "inventory_check_role_interfaces": role_interfaces,
            "inventory_check_scope": scope,
            "inventory_check_rule": rule,
            "inventory_check_unknown_variables": unknown_variables,
            "inventory_check_warn": warn,
        }
