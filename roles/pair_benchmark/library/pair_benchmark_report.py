#!/usr/bin/python
"""Render the benchmark report from `vllm bench serve` result files, beside the reference."""

from __future__ import annotations

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.pair_benchmark.forecast import ForecastFileError, load_forecast
from ansible.module_utils.pair_benchmark.load_to_ready import load_to_ready
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
    case beside the reference deployment's figure and, where forecast names a file that lists
    the case, the forecast's figure; each row with its median TTFT, prefill and decode rates.
  - Reports the service's load-to-ready from ready_record, the record vllm_tp2_service's
    readiness gate keeps on rank 0, unless its rank 0 start is not service_started.
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
  forecast:
    description:
      - A model's forecast per case ({"gpu", "cases": {case: {"tok_s"}}}); a missing file leaves
        the predicted column empty, an unreadable one too, with a warning.
    type: path
  ready_record:
    description: The text of the service's readiness record on rank 0 ('' where it has none).
    type: str
    default: ''
  service_started:
    description: When rank 0's service container started (docker's State.StartedAt; '' unknown).
    type: str
    default: ''
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
load_to_ready_s:
  description: The service's load-to-ready, seconds (null when not known).
  type: float
  returned: when written
load_to_ready_note:
  description: Why the load-to-ready is not known ('' when it is).
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
            "forecast": {"type": "path"},
            "ready_record": {"type": "str", "default": ""},
            "service_started": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    out = Path(module.params["out"])
    markdown = out / MARKDOWN_NAME
    if markdown.exists() or module.check_mode:
        module.exit_json(changed=not markdown.exists(), markdown=str(markdown))
    forecast_path = module.params["forecast"]
    forecast, forecast_note = None, ""
    try:
        forecast = load_forecast(Path(forecast_path) if forecast_path else None)
    except ForecastFileError as error:
        # The measurement is done by now: report it, with the column empty and the reason.
        forecast_note = f"unreadable forecast ({error})"
        module.warn(forecast_note)
    try:
        report = write_report(
            load_results(Path(module.params["results_dir"])),
            out,
            module.params["title"],
            {str(key): str(value) for key, value in module.params["context"].items()},
            forecast=forecast,
            load=load_to_ready(module.params["ready_record"], module.params["service_started"]),
            forecast_note=forecast_note,
        )
    except (NoResultsError, ResultFileError) as error:
        module.fail_json(msg=str(error))
    module.exit_json(
        changed=True,
        markdown=str(report.markdown),
        figure=str(report.figure),
        summary=str(report.summary),
        load_to_ready_s=report.load.seconds,
        load_to_ready_note=report.load.note,
    )


if __name__ == "__main__":
    main()
