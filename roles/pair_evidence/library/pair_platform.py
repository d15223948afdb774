#!/usr/bin/python
"""Read what the node runs on (kernel, GPU driver, RDMA firmware) and the last validated record."""

from __future__ import annotations

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.pair_evidence.platform import changes, platform, read_record

DOCUMENTATION = r"""
module: pair_platform
short_description: Read the node's kernel, GPU driver and RDMA firmware, and the validated record
description:
  - Reads procfs and sysfs (no root needed) and the record a validated run left; changes nothing.
options:
  record:
    description: The file a validated run records the platform in (JSON).
    type: path
    required: true
  sysfs_root:
    description: Where sysfs is (a made-up tree in tests).
    type: path
    default: /sys
  proc_root:
    description: Where procfs is (a made-up tree in tests).
    type: path
    default: /proc
"""

RETURN = r"""
platform:
  description: >-
    kernel, gpu_driver (null without the NVIDIA module) and rdma_firmware (device -> version).
  type: dict
  returned: success
validated:
  description: The platform the last validated run recorded, or null when there is none.
  type: dict
  returned: success
since_validated:
  description: >-
    Each change since that record ('gpu_driver 580.95.05 -> 580.105.08'), empty when none, null
    when there is no record.
  type: list
  elements: str
  returned: success
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "record": {"type": "path", "required": True},
            "sysfs_root": {"type": "path", "default": "/sys"},
            "proc_root": {"type": "path", "default": "/proc"},
        },
        supports_check_mode=True,
    )
    params = module.params
    now = platform(Path(params["sysfs_root"]), Path(params["proc_root"]))
    validated = read_record(Path(params["record"]))
    module.exit_json(
        changed=False,
        platform=now,
        validated=validated,
        since_validated=None if validated is None else changes(validated, now),
    )


if __name__ == "__main__":
    main()
