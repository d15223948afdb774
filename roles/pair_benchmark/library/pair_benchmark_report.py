#!/usr/bin/python
"""Render the benchmark report from `vllm bench serve` result files, beside the reference."""

from __future__ import annotations

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.pair_benchmark.report import (
    MARKDOWN_NAME,
    NoResultsError,
    ResultFileError,
    load_results,
    write_report,
)

DOCUMENTATION = r"""
module: pair_benchmark_report
short_description: Write report.md, throughput.png and summary.json from vllm bench serve results
description:
  - Reads every *.json result file of results_dir (a case per file, named by its
    `--metadata case=` or its file name) and writes the report into out, one row per reference
    case beside the reference deployment's figure.
  - Leaves a report already in out as it is (changed false).
  - Needs matplotlib where it runs (the controller's Python).
options:
  results_dir:
    description: Directory of the result files.
    type: path
    required: true
  out:
    description: Directory the report is written to.
    type: path
    required: true
  title:
    description: Title of the report and the figure.
    type: str
    default: dualspark benchmark
  context:
    description: Lines of the report's header (key -> value), also kept in summary.json.
    type: dict
    default: {}
"""

RETURN = r"""
markdown:
  description: Path of report.md.
  type: str
  returned: success
figure:
  description: Path of throughput.png.
  type: str
  returned: when written
summary:
  description: Path of summary.json.
  type: str
  returned: when written
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "results_dir": {"type": "path", "required": True},
            "out": {"type": "path", "required": True},
            "title": {"type": "str", "default": "dualspark benchmark"},
            "context": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    out = Path(module.params["out"])
    markdown = out / MARKDOWN_NAME
    if markdown.exists() or module.check_mode:
        module.exit_json(changed=not markdown.exists(), markdown=str(markdown))
    try:
        report = write_report(
            load_results(Path(module.params["results_dir"])),
            out,
            module.params["title"],
            {str(key): str(value) for key, value in module.params["context"].items()},
        )
    except (NoResultsError, ResultFileError) as error:
        module.fail_json(msg=str(error))
    module.exit_json(
        changed=True,
        markdown=str(report.markdown),
        figure=str(report.figure),
        summary=str(report.summary),
    )


if __name__ == "__main__":
    main()
