#!/usr/bin/python
"""Read one kind of evidence of a Spark pair's rail from a tool's output."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.pair_evidence.readings import READINGS

DOCUMENTATION = r"""
module: pair_evidence
short_description: Read NCCL's transport, all-reduce figures or ib_write_bw's bandwidth from output
description:
  - Parses the text a tool printed and returns what it says as data; changes nothing.
  - Fails, saying why, when the text holds nothing of that kind (no all-reduce row, no
    ib_write_bw result row, ib_write_bw reporting in MB/s).
options:
  kind:
    description:
      - nccl_log (NCCL_DEBUG=INFO lines), allreduce (nccl-tests' all_reduce_perf or the
        all-reduce script of pair_validate), or ib_write_bw (run with --report_gbits).
    type: str
    required: true
    choices: [nccl_log, allreduce, ib_write_bw]
  text:
    description: The tool's output.
    type: str
    required: true
"""

RETURN = r"""
reading:
  description: >-
    nccl_log - transport (IB, Socket or unknown), uses_rdma, ib_devices, socket_interfaces,
    gid_index, version, warnings and the evidence lines; allreduce - source, rows, largest,
    peak_busbw_gbytes, avg_busbw_gbytes and wrong_total; ib_write_bw - message_bytes, iterations,
    peak_gbits and average_gbits.
  type: dict
  returned: success
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "kind": {"type": "str", "required": True, "choices": sorted(READINGS)},
            "text": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    try:
        reading = READINGS[module.params["kind"]](module.params["text"].splitlines())
    except ValueError as error:
        module.fail_json(msg=str(error))
    module.exit_json(changed=False, reading=reading)


if __name__ == "__main__":
    main()
