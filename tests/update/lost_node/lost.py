"""Test double: an Ansible connection that never connects, standing in for a Spark that stops
answering in the middle of a rolling update (there is no way to pull a real one's cable here)."""

from __future__ import annotations

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.connection.local import Connection as LocalConnection

DOCUMENTATION = """
name: lost
short_description: a host that stopped answering (test double)
description: Every connection attempt fails as an unreachable host's would.
author: dualspark
"""


class Connection(LocalConnection):
    transport = "lost"

    def _connect(self) -> LocalConnection:
        raise AnsibleConnectionFailure("stand-in for a node that stopped answering")
