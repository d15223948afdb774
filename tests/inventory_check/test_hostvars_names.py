"""Which names hostvars holds for a host in the first play of a run (ansible-core 2.19), before
any role ran: the inventory's variables, -e's, and Ansible's magic variables, none of which carries
a role's prefix; group names are not variables. The unknown-variables rule relies on this."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.helpers import REPO
from tests.inventory_check.conftest import flat, good_inventory, run_playbook, write_inventory

MAGIC = {
    "ansible_check_mode",
    "ansible_config_file",
    "ansible_diff_mode",
    "ansible_facts",
    "ansible_forks",
    "ansible_inventory_sources",
    "ansible_playbook_python",
    "ansible_run_tags",
    "ansible_skip_tags",
    "ansible_verbosity",
    "ansible_version",
    "group_names",
    "groups",
    "inventory_dir",
    "inventory_file",
    "inventory_hostname",
    "inventory_hostname_short",
    "playbook_dir",
}
ROLES = sorted(path.parent.parent.name for path in REPO.glob("roles/*/meta/argument_specs.yml"))


def test_hostvars_in_the_first_play(tmp_path: Path) -> None:
    inventory = good_inventory()
    inventory["groups"]["rail_network_group"] = {}  # a group named like a role's variable
    out = tmp_path / "names.json"
    playbook = tmp_path / "names.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Dump the names hostvars holds for s1 and s3",
                    "hosts": "dualspark",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Write them on the controller",
                            "ansible.builtin.copy": {
                                "content": "{{ {'s1': hostvars['s1'].keys() | list, "
                                "'s3': hostvars['s3'].keys() | list} | to_json }}",
                                "dest": str(out),
                                "mode": "0644",
                            },
                            "delegate_to": "localhost",
                            "run_once": True,
                        }
                    ],
                }
            ]
        ),
        encoding="utf-8",
    )
    path = write_inventory(tmp_path / "inventory", inventory)
    result = run_playbook(path, "-e", "rolling_update_release=r1", playbook=str(playbook))
    assert result.returncode == 0, flat(result)
    names = json.loads(out.read_text(encoding="utf-8"))
    for host, group in (("s1", "pair_one"), ("s3", "pair_two")):
        host_vars = inventory["groups"][group][host] | inventory["host_vars"][host]
        set_here = {*inventory["group_vars"]["all"], *inventory["group_vars"][group], *host_vars}
        assert set(names[host]) == MAGIC | set_here | {"rolling_update_release"}, host
    assert not [name for name in MAGIC if any(name.startswith(r + "_") for r in ROLES)]
    assert "rail_network_group" not in names["s1"]
