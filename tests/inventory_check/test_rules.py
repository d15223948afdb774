"""Each rule of inventory_check, broken alone in a made-up inventory of two pairs and run through
playbooks/check.yml: the play fails with that one problem, naming the variable, the hosts and the
fix. Legitimate variants of the same settings pass.

Each case's inventory is a world of its own (conftest.World: its own hosts, groups and subnets)
in one inventory shared by all the cases, checked in one run: the role lists every problem in one
refusal, each naming its hosts, so a case's test takes the messages that name its hosts, and
there must be exactly its one. A pair the case leaves alone (and does not refer to) is left out of
its world. The legitimate variants share a second run, which must pass whole; the cases that need
-e (a variable for every host) have runs of their own. The runs start together."""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.inventory_check.conftest import (
    API_KEY,
    DIGEST,
    GOOD,
    REVISION,
    Inventory,
    Run,
    World,
    combine,
    flat,
    good_inventory,
    hosts_of,
    named_hosts,
    naming,
    problems,
    recap_hosts,
    start_playbook,
    tail,
    warnings,
    write_inventory,
)

ALL = "s1, s2, s3, s4"
UNREADABLE = "{{ lookup('ansible.builtin.file', '/nonexistent/image.id') }}"


def setting(where: str, **variables: Any) -> Callable[[Inventory], None]:
    """Set variables in group_vars/<where> or host_vars/<where> (s1..s4 are hosts)."""

    def mutate(inventory: Inventory) -> None:
        kind = "host_vars" if where.startswith("s") else "group_vars"
        inventory[kind].setdefault(where, {}).update(variables)

    return mutate


def dropping(where: str, name: str) -> Callable[[Inventory], None]:
    def mutate(inventory: Inventory) -> None:
        kind = "host_vars" if where.startswith("s") else "group_vars"
        del inventory[kind][where][name]

    return mutate


def address(host: str, interface: str, value: Any) -> Callable[[Inventory], None]:
    def mutate(inventory: Inventory) -> None:
        inventory["host_vars"][host]["rail_network_addresses"][interface] = value

    return mutate


def both(*mutations: Callable[[Inventory], None]) -> Callable[[Inventory], None]:
    def mutate(inventory: Inventory) -> None:
        for mutation in mutations:
            mutation(inventory)

    return mutate


def third_host_in_pair_two(inventory: Inventory) -> None:
    inventory["groups"]["pair_two"]["s5"] = {"spark_pair_rank": 1}
    inventory["host_vars"]["s5"] = dict(inventory["host_vars"]["s4"])


def twins(first: str, second: str) -> list[dict[str, str]]:
    return [
        {"interface": "enp1s0f1np1", "subnet": first},
        {"interface": "enP2p1s0f1np1", "subnet": second},
    ]


@dataclass
class Case:
    id: str
    mutate: Callable[[Inventory], None]
    variable: str
    hosts: str
    says: list[str]
    args: list[str] = field(default_factory=list)


CASES = [
    # pairs
    Case(
        "pair-name-unset",
        dropping("pair_two", "spark_pair_name"),
        "spark_pair_name",
        "s3, s4",
        ["is not set.", "group_vars/<pair>/pair.yml"],
    ),
    Case(
        "pair-name-no-group",
        setting("pair_two", spark_pair_name="pair_2"),
        "spark_pair_name",
        "s3, s4",
        ["is 'pair_2', which is no inventory group."],
    ),
    Case(
        "pair-group-of-three",
        third_host_in_pair_two,
        "spark_pair_name",
        "s3, s4, s5",
        ["whose group holds ['s3', 's4', 's5']", "exactly its two hosts"],
    ),
    Case(
        "rank-out-of-range",
        setting("s2", spark_pair_rank=2),
        "spark_pair_rank",
        "s2",
        ["is 2.", "0 on the API node and 1 on the headless node"],
    ),
    Case(
        "ranks-equal",
        setting("s2", spark_pair_rank=0),
        "spark_pair_rank",
        "s1, s2",
        ["is 0 on both nodes of pair pair_one."],
    ),
    # rail
    Case(
        "one-twin",
        setting("pair_one", rail_network_twins=twins("192.168.100.0/24", "x")[:1]),
        "rail_network_twins",
        "s1, s2",
        ["must list the two port twins", "group_vars/pair_one/rail_network.yml"],
    ),
    Case(
        "subnet-with-host-bits",
        setting("pair_one", rail_network_twins=twins("192.168.100.1/24", "192.168.101.0/24")),
        "rail_network_twins[0].subnet",
        "s1, s2",
        ["is '192.168.100.1/24' (twin enp1s0f1np1): not an IPv4 network in CIDR form"],
    ),
    Case(
        "twins-overlap",
        setting("pair_one", rail_network_twins=twins("192.168.100.0/24", "192.168.100.0/25")),
        "rail_network_twins",
        "s1, s2",
        ["gives both twins overlapping subnets"],
    ),
    Case(
        "address-outside-subnet",
        address("s2", "enP2p1s0f1np1", "192.168.100.11"),
        "rail_network_addresses['enP2p1s0f1np1']",
        "s2",
        ["is 192.168.100.11, outside the usable addresses", "subnet 192.168.101.0/24"],
    ),
    Case(
        "address-is-broadcast",
        address("s2", "enP2p1s0f1np1", "192.168.101.255"),
        "rail_network_addresses['enP2p1s0f1np1']",
        "s2",
        ["is 192.168.101.255, outside the usable addresses"],
    ),
    Case(
        "address-with-prefix",
        address("s2", "enp1s0f1np1", "192.168.100.11/24"),
        "rail_network_addresses['enp1s0f1np1']",
        "s2",
        ["is '192.168.100.11/24', not a plain IPv4 address.", "host_vars/s2/rail_network.yml"],
    ),
    Case(
        "address-missing",
        lambda inv: inv["host_vars"]["s4"]["rail_network_addresses"].pop("enP2p1s0f1np1"),
        "rail_network_addresses['enP2p1s0f1np1']",
        "s4",
        ["is unset: twin enP2p1s0f1np1 has no address."],
    ),
    Case(
        "address-of-no-twin",
        address("s1", "enp9s0", "10.0.0.1"),
        "rail_network_addresses['enp9s0']",
        "s1",
        ["names no twin of rail_network_twins (enp1s0f1np1, enP2p1s0f1np1)."],
    ),
    Case(
        "same-address-on-both-nodes",
        address("s2", "enp1s0f1np1", "192.168.100.10"),
        "rail_network_addresses['enp1s0f1np1']",
        "s1, s2",
        ["is 192.168.100.10 on both nodes of pair pair_one."],
    ),
    Case(
        "twins-differ-in-pair",
        setting(
            "s2", rail_network_twins=list(reversed(twins("192.168.100.0/24", "192.168.101.0/24")))
        ),
        "rail_network_twins",
        "s1, s2",
        ["differ between the nodes of pair pair_one"],
    ),
    Case(
        "mtu-not-allowed",
        setting("pair_two", rail_network_mtu=1500),
        "rail_network_mtu",
        "s3, s4",
        ["is 1500; the rail takes 9000 or 4200."],
    ),
    Case(
        "mtu-differs-in-pair",
        setting("s2", rail_network_mtu=4200),
        "rail_network_mtu",
        "s1, s2",
        ["is 9000 on s1 but 4200 on s2", "IBV_WC_RETRY_EXC_ERR"],
    ),
    Case(
        "pairs-share-a-subnet",
        both(
            setting("pair_two", rail_network_twins=twins("192.168.100.0/24", "192.168.111.0/24")),
            address("s3", "enp1s0f1np1", "192.168.100.20"),
            address("s4", "enp1s0f1np1", "192.168.100.21"),
        ),
        "rail_network_twins",
        "s3, s4",
        ["subnet 192.168.100.0/24, which overlaps 192.168.100.0/24 of pair pair_one"],
    ),
    # rendezvous
    Case(
        "master-address-not-rank0",
        setting("pair_one", vllm_tp2_service_master_address="192.168.100.11"),
        "vllm_tp2_service_master_address",
        "s1, s2",
        ["is '192.168.100.11', not a rail address of s1, rank 0 of pair pair_one"],
    ),
    Case(
        "node-address-not-own",
        setting("s2", vllm_tp2_service_node_address="192.168.100.10"),
        "vllm_tp2_service_node_address",
        "s2",
        ["is '192.168.100.10', not one of this node's rail addresses"],
    ),
    # image
    Case(
        "digest-empty",
        setting("all", container_runtime_image_digest=""),
        "container_runtime_image_digest",
        ALL,
        ["is empty.", "docker buildx imagetools inspect"],
    ),
    Case(
        "digest-malformed",
        setting("all", container_runtime_image_digest="sha256:" + "A" * 64),
        "container_runtime_image_digest",
        ALL,
        ["not sha256:<64 lowercase hex>"],
    ),
    Case(
        "image-id-malformed",
        setting("all", container_runtime_pin="image_id", container_runtime_image_digest="abc123"),
        "container_runtime_image_digest",
        ALL,
        ["is 'abc123'", "ID of the local image", "docker image inspect"],
    ),
    Case(
        "pin-unknown",
        setting("all", container_runtime_pin="tag"),
        "container_runtime_pin",
        ALL,
        ["is 'tag'.", "repo_digest", "image_id"],
    ),
    Case(
        "image-with-digest",
        setting("all", container_runtime_image="registry.example/team/vllm@" + DIGEST),
        "container_runtime_image",
        ALL,
        ["carries a digest"],
    ),
    Case(
        "digest-differs-in-pair",
        setting("s2", container_runtime_image_digest="sha256:" + "f" * 64),
        "container_runtime_image_digest",
        "s1, s2",
        ["differs between the nodes of pair pair_one"],
    ),
    # API key
    Case(
        "api-key-empty",
        setting("all", vllm_tp2_service_api_key=""),
        "vllm_tp2_service_api_key",
        "s1, s3",
        ["is empty (the host is rank 0 of its pair and serves the API with it)."],
    ),
    Case(
        "api-key-short",
        setting("pair_two", vllm_tp2_service_api_key="short-key"),
        "vllm_tp2_service_api_key",
        "s3",
        ["has 9 characters, fewer than 16"],
    ),
    Case(
        "api-key-blank-inside",
        setting("all", vllm_tp2_service_api_key="secret with a blank inside"),
        "vllm_tp2_service_api_key",
        "s1, s3",
        ["holds characters other than A-Za-z0-9"],
    ),
    # checkpoint
    Case(
        "revision-empty",
        setting("all", model_weights_revision=""),
        "model_weights_revision",
        ALL,
        ["is empty: the checkpoint must be pinned to a commit", "40-digit"],
    ),
    Case(
        "revision-branch",
        setting("all", model_weights_revision="main"),
        "model_weights_revision",
        ALL,
        ["is 'main'"],
    ),
    Case(
        "repo-without-owner",
        setting("all", model_weights_repo_id="model"),
        "model_weights_repo_id",
        ALL,
        ["is 'model', not a hub repository owner/name."],
    ),
    Case(
        "draft-without-revision",
        setting("all", model_weights_draft_repo_id="team/drafter"),
        "model_weights_draft_revision",
        ALL,
        ["is empty while a drafter is set (team/drafter)"],
    ),
    Case(
        "draft-is-the-checkpoint",
        setting(
            "all", model_weights_draft_repo_id="team/model", model_weights_draft_revision=REVISION
        ),
        "model_weights_draft_repo_id",
        ALL,
        ["the checkpoint's own repository"],
    ),
    Case(
        "revision-differs-in-pair",
        setting("s4", model_weights_revision="f" * 40),
        "model_weights_revision",
        "s3, s4",
        ["differs between the nodes of pair pair_two"],
    ),
    Case(
        "stand-in-without-directory",
        setting("all", model_weights_source="stand_in_directory"),
        "model_weights_stand_in_directory",
        ALL,
        ["is empty while model_weights_source is stand_in_directory."],
    ),
    # overlay
    Case(
        "small-m-not-below-large-m",
        setting("all", dualpath_overlay_small_m_max=2048),
        "dualpath_overlay_large_m_min",
        ALL,
        ["is 1024, not above dualpath_overlay_small_m_max (2048)"],
    ),
    Case(
        "large-m-from-extra-env",
        setting("all", dualpath_overlay_extra_env={"DUALPATH_LARGE_M_MIN": "16"}),
        "dualpath_overlay_extra_env['DUALPATH_LARGE_M_MIN']",
        ALL,
        ["is 16, not above dualpath_overlay_small_m_max (20)"],
    ),
    Case(
        "unpack-ahead-depth",
        setting("all", dualpath_overlay_unpack_ahead_depth=4),
        "dualpath_overlay_unpack_ahead_depth",
        ALL,
        ["is 4: DUALPATH_UNPACK_AHEAD_DEPTH is 1 to 3 layers."],
    ),
    Case(
        "unpack-ahead-min-m-negative",
        setting("all", dualpath_overlay_unpack_ahead_min_m=-1),
        "dualpath_overlay_unpack_ahead_min_m",
        ALL,
        ["is '-1': DUALPATH_UNPACK_AHEAD_MIN_M takes a whole number, 0 or more."],
    ),
    Case(
        "channel-scale",
        setting("all", dualpath_overlay_channel_scale="row"),
        "dualpath_overlay_channel_scale",
        ALL,
        ["is 'row': DUALPATH_CHANNEL_SCALE is epilogue or unpack."],
    ),
    Case(
        "flag-from-service-extra-env",
        setting("all", vllm_tp2_service_extra_env={"DUALPATH_UNPACK_AHEAD": "maybe"}),
        "vllm_tp2_service_extra_env['DUALPATH_UNPACK_AHEAD']",
        ALL,
        ["is 'maybe': DUALPATH_UNPACK_AHEAD takes a boolean."],
    ),
    Case(
        "stats-dir-relative",
        setting("all", vllm_tp2_service_container_overlay_stats_dir="calls"),
        "vllm_tp2_service_container_overlay_stats_dir",
        ALL,
        ["is 'calls': DUALPATH_STATS_DIR must be an absolute path"],
    ),
    # service
    Case(
        "speculative-method",
        setting("all", vllm_tp2_service_speculative_method="eagle"),
        "vllm_tp2_service_speculative_method",
        ALL,
        ["is 'eagle'.", "use mtp"],
    ),
    Case(
        "dflash-without-drafter",
        setting("all", vllm_tp2_service_speculative_method="dflash"),
        "vllm_tp2_service_speculative_method",
        ALL,
        ["is dflash, but no drafter is staged"],
    ),
    Case(
        "drain-timeout-zero",
        setting("all", vllm_tp2_service_drain_timeout_s=0),
        "vllm_tp2_service_drain_timeout_s",
        ALL,
        ["is 0: vLLM's --shutdown-timeout below 1 aborts every request"],
    ),
    Case(
        "port-out-of-range",
        setting("all", vllm_tp2_service_port=70000),
        "vllm_tp2_service_port",
        ALL,
        ["is 70000, not a TCP port."],
    ),
    # rollback (rollback.yml's concern)
    Case(
        "rollback-release-missing",
        lambda inventory: None,
        "rolling_update_release",
        ALL,
        ["is empty.", "-e rolling_update_release=<release>"],
        ["-e", '{"inventory_check_concerns": ["rollback"]}'],
    ),
    Case(
        "rollback-release-a-path",
        lambda inventory: None,
        "rolling_update_release",
        ALL,
        ["is '../etc', not a release name."],
        ["-e", "rolling_update_release=../etc", "-e", '{"inventory_check_concerns": ["rollback"]}'],
    ),
    # options against the argument specs
    Case(
        "option-choice",
        setting("all", model_weights_share="smb"),
        "model_weights_share",
        ALL,
        ["value of model_weights_share must be one of: copy, nfs, got: smb."],
    ),
    Case(
        "option-type",
        setting("pair_one", rail_network_bandwidth_test="maybe"),
        "rail_network_bandwidth_test",
        "s1, s2",
        ["unable to convert to bool"],
    ),
    # a value the controller cannot evaluate
    Case(
        "digest-unreadable",
        setting(
            "all",
            container_runtime_image_digest=UNREADABLE,
        ),
        "container_runtime_image_digest",
        ALL,
        ["cannot be evaluated on the controller before the play", "/nonexistent/image.id"],
    ),
]


PASSING = {
    "master-address-rank0-second-twin": setting(
        "pair_one", vllm_tp2_service_master_address="192.168.101.10"
    ),
    "node-addresses-own": both(
        setting("s1", vllm_tp2_service_node_address="192.168.100.10"),
        setting("s2", vllm_tp2_service_node_address="192.168.101.11"),
    ),
    "image-id-pin": setting("all", container_runtime_pin="image_id"),
    "api-key-only-where-served": both(
        setting("s2", vllm_tp2_service_api_key=""), setting("s4", vllm_tp2_service_api_key="x")
    ),
    "drafter-pinned-with-dflash": setting(
        "all",
        model_weights_draft_repo_id="team/drafter",
        model_weights_draft_revision="f" * 40,
        vllm_tp2_service_speculative_method="dflash",
    ),
    "overlay-off-reads-nothing-else": setting(
        "all", dualpath_overlay_enabled=False, dualpath_overlay_small_m_max=4096
    ),
    "overlay-settings-as-text": setting(
        "all",
        dualpath_overlay_small_m_max="32",
        dualpath_overlay_unpack_ahead_depth=3,
        dualpath_overlay_extra_env={"DUALPATH_STRICT": "yes", "DUALPATH_CHANNEL_SCALE": "UNPACK"},
    ),
    "mtu-4200-on-a-pair": setting("pair_two", rail_network_mtu=4200),
    "sixteen-character-key": setting("all", vllm_tp2_service_api_key="0123456789abcdef"),
}


AT_ONCE = "all-at-once"
# Values no case above uses: the same problem in two worlds of one run would be one message.
AT_ONCE_BROKEN = both(
    setting("all", model_weights_revision="develop", vllm_tp2_service_drain_timeout_s=-1),
    setting("pair_two", rail_network_mtu=1500),
)
GOOD_WORLD = "good"


@dataclass(frozen=True)
class Placed:
    """A made-up inventory placed in a run beside others: its world, its hosts there, the run."""

    world: World
    hosts: list[str]
    run: Future[Run]


def without_bystanders(inventory: Inventory) -> Inventory:
    """Only GOOD's pairs that the mutation touched or that what it touched refers to (every pair
    when it touched group_vars/all or added a group): the others are bystanders, and the other
    worlds of the run give the inventory pairs enough."""
    if set(inventory["groups"]) != set(GOOD["groups"]) or set(inventory["group_vars"]) != set(
        GOOD["group_vars"]
    ):
        return inventory
    if inventory["group_vars"]["all"] != GOOD["group_vars"]["all"]:
        return inventory

    def parts(source: Inventory, pair: str) -> list[Any]:
        hosts = sorted({*GOOD["groups"][pair], *inventory["groups"][pair]})
        host_vars = [source["host_vars"].get(host) for host in hosts]
        return [source["groups"][pair], source["group_vars"][pair], *host_vars]

    touched = [pair for pair in GOOD["groups"] if parts(inventory, pair) != parts(GOOD, pair)]
    if not touched:
        return inventory
    changed = repr([parts(inventory, pair) for pair in touched])
    for pair in GOOD["groups"]:
        subnets = [
            twin["subnet"].rsplit(".", 1)[0]
            for twin in GOOD["group_vars"][pair]["rail_network_twins"]
        ]
        names = [pair, *GOOD["groups"][pair]]
        refers = any(re.search(rf"\b{re.escape(name)}\b", changed) for name in names) or any(
            f"{subnet}." in changed for subnet in subnets
        )
        if pair in touched or refers:
            continue
        for host in inventory["groups"].pop(pair):
            del inventory["host_vars"][host]
        del inventory["group_vars"][pair]
    return inventory


def place(
    pool: ThreadPoolExecutor,
    directory: Path,
    mutations: dict[str, Callable[[Inventory], None]],
    *args: str,
) -> dict[str, Placed]:
    """Each mutation of GOOD (without its bystanders) as a world of one inventory, and one run
    of playbooks/check.yml over them all (started, not awaited)."""
    worlds = []
    for number, (name, mutate) in enumerate(mutations.items(), start=1):
        inventory = good_inventory()
        mutate(inventory)
        worlds.append((World(name.replace("-", "_"), number), without_bystanders(inventory)))
    run = start_playbook(pool, write_inventory(directory, combine(worlds)), *args)
    return {
        name: Placed(world, [world.rename(host) for host in hosts_of(inventory)], run)
        for name, (world, inventory) in zip(mutations, worlds, strict=True)
    }


# Cases that pass -e (which sets a variable for every host) run on their own; all the others
# share one run, as do the legitimate variants.
SHARED = [case for case in CASES if not case.args]
ALONE = [case for case in CASES if case.args]


@pytest.fixture(scope="module")
def placed(pool: ThreadPoolExecutor, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Placed]:
    """Every case's, variant's and the good inventory's place, the runs started together."""
    directory = tmp_path_factory.mktemp("rules")
    refused = {case.id: case.mutate for case in SHARED} | {AT_ONCE: AT_ONCE_BROKEN}
    passing = {GOOD_WORLD: good_inventory_as_is} | PASSING
    found = place(pool, directory / "refused", refused)
    found |= place(pool, directory / "passing", passing)
    for case in ALONE:
        found |= place(pool, directory / case.id, {case.id: case.mutate}, *case.args)
    assert len(found) == len(refused) + len(passing) + len(ALONE)
    return found


def good_inventory_as_is(inventory: Inventory) -> None:
    """No change: GOOD."""


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_each_rule_refuses_with_its_message(placed: dict[str, Placed], case: Case) -> None:
    """The one message that names the case's hosts; no other names them."""
    world, hosts = placed[case.id].world, placed[case.id].hosts
    result = placed[case.id].run.result()
    output = flat(result)
    assert result.returncode != 0, tail(result)
    found = naming(problems(result), hosts)
    assert len(found) == 1, "\n".join(found) or tail(result)
    message = " ".join(found[0].split())
    assert message.startswith(f"{case.variable} ({world.rename(case.hosts)}): "), message
    for words in case.says:
        assert world.rename(words) in message, (world.rename(words), message)
    assert " Fix: " in message, message
    assert "nothing was changed on any node" in output, tail(result)
    assert API_KEY not in output and "secret with a blank inside" not in output


@pytest.mark.parametrize("variant", PASSING)
def test_legitimate_variants_pass(placed: dict[str, Placed], variant: str) -> None:
    """No message and no warning names the variant's hosts (that the shared run passes whole,
    test_the_passing_run_passes_whole)."""
    hosts = placed[variant].hosts
    result = placed[variant].run.result()
    assert set(hosts) <= recap_hosts(result), tail(result)
    assert result.returncode == 0 or problems(result), tail(result)  # the check ran through
    assert not naming(problems(result), hosts), naming(problems(result), hosts)
    assert not naming(warnings(result), hosts), naming(warnings(result), hosts)


def test_a_made_up_inventory_with_every_rule_holding_passes(placed: dict[str, Placed]) -> None:
    hosts = placed[GOOD_WORLD].hosts
    result = placed[GOOD_WORLD].run.result()
    assert set(hosts) <= recap_hosts(result), tail(result)
    assert result.returncode == 0 or problems(result), tail(result)
    assert not naming(problems(result), hosts), naming(problems(result), hosts)
    assert "Check the twins, rail addresses and MTU of every pair" in flat(result)


def test_the_passing_run_passes_whole(placed: dict[str, Placed]) -> None:
    """The good inventory and every legitimate variant, in one run: it passes, without a
    warning."""
    result = placed[GOOD_WORLD].run.result()
    assert all(placed[variant].run is placed[GOOD_WORLD].run for variant in PASSING)
    assert result.returncode == 0, tail(result)
    assert "[WARNING]" not in flat(result), warnings(result)


def test_all_problems_are_reported_at_once(placed: dict[str, Placed]) -> None:
    """Three problems of one inventory in one refusal; and the shared run's refusal holds every
    case's message, each naming the hosts of that case only."""
    result = placed[AT_ONCE].run.result()
    assert result.returncode != 0
    found = problems(result)
    assert [message.split(" ", 1)[0] for message in naming(found, placed[AT_ONCE].hosts)] == [
        "rail_network_mtu",
        "model_weights_revision",
        "vllm_tp2_service_drain_timeout_s",
    ], found
    sharing = [name for name, where in placed.items() if where.run is placed[AT_ONCE].run]
    owners = [
        [name for name in sharing if set(named_hosts(message)) <= set(placed[name].hosts)]
        for message in found
    ]
    assert all(len(owner) == 1 for owner in owners), list(zip(found, owners, strict=True))
    assert len(found) == len(SHARED) + 3, found
    assert f"The inventory has {len(found)} problem(s)" in flat(result)
