#!/usr/bin/python
"""Judge a Spark pair from both nodes' observations: each finding with its fix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.pair_doctor.judge import judge
from ansible.module_utils.pair_evidence.readings import nccl_log_reading

DOCUMENTATION = r"""
module: pair_doctor_judge
short_description: Judge a Spark pair's observations and return every finding with its fix
description:
  - Runs the doctor's checks (module_utils/pair_doctor/checks.py) on what pair_doctor_collect.py
    observed on each node, after reading NCCL's transport from the NCCL lines of each node's
    units (the pair_evidence role).
  - Changes nothing; whether errors fail the run is the caller's.
options:
  observations:
    description: Host name -> what pair_doctor_collect.py printed on that host.
    type: dict
    required: true
  expectations:
    description: rail_interfaces, rail_mtu, min_available_gib and max_clock_skew_s.
    type: dict
    default: {}
  only:
    description: Run only these checks (empty for all).
    type: list
    elements: str
    default: []
"""

RETURN = r"""
findings:
  description: Every finding (check, host, severity, summary, fix), errors first, then warnings,
    skipped checks and ok.
  type: list
  returned: success
counts:
  description: Findings per severity (error, warning, skipped, ok).
  type: dict
  returned: success
text:
  description: The report, one line per finding and one per fix.
  type: list
  returned: success
"""


def with_nccl_transport(observations: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Each node's observation with the transport its units' NCCL lines name."""
    return {
        host: {
            **node,
            "nccl_transport": nccl_log_reading(
                line for unit in node["units"].values() for line in unit["nccl_log"]
            ),
        }
        for host, node in observations.items()
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "observations": {"type": "dict", "required": True},
            "expectations": {"type": "dict", "default": {}},
            "only": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        result = judge(
            with_nccl_transport(module.params["observations"]),
            module.params["expectations"],
            module.params["only"],
        )
    except (ValueError, KeyError) as error:
        module.fail_json(msg=f"{type(error).__name__}: {error}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
