#!/usr/bin/python
"""Write one Grafana dashboard per Spark pair, and the PromQL of its panels."""

from __future__ import annotations

import json
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.pair_dashboards.dashboard import check, dashboard, panel_queries

DOCUMENTATION = r"""
module: pair_dashboards_render
short_description: Write pair-<name>.json, a Grafana dashboard per pair, and its panels' queries
description:
  - Writes dest/pair-<name>.json for every pair (module_utils/pair_dashboards/dashboard.py), each
    checked first (uid, datasource, known metric names, the pair's selector in every query);
    a dashboard that fails its check fails the module and nothing is written.
  - With queries_dest, writes queries_dest/pair-<name>.json too, [{title, promql}] of every panel
    target and annotation, ready for Prometheus to evaluate.
  - Removes the pair-*.json files of dest whose pair is not in pairs.
  - Leaves a file that already has the content as it is (changed false); supports check mode.
options:
  pairs:
    description: Names of the pairs (their inventory groups).
    type: list
    elements: str
    required: true
  datasource_uid:
    description: UID of the Prometheus datasource every panel queries.
    type: str
    required: true
  dest:
    description: Directory of the dashboards (made if missing).
    type: path
    required: true
  queries_dest:
    description: Directory of the query lists; none written when omitted.
    type: path
"""

RETURN = r"""
dashboards:
  description: Paths of the dashboards, one per pair, in the order of pairs.
  type: list
  elements: str
  returned: success
uids:
  description: Each pair's dashboard UID (Grafana shows it at /d/<uid>).
  type: dict
removed:
  description: Dashboards of pairs no longer in pairs, removed from dest.
  type: list
  elements: str
  returned: success
"""


def write(path: Path, text: str, check_mode: bool) -> bool:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    if not check_mode:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        path.chmod(0o644)  # Grafana reads them as its own user
    return True


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "pairs": {"type": "list", "elements": "str", "required": True},
            "datasource_uid": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "queries_dest": {"type": "path"},
        },
        supports_check_mode=True,
    )
    pairs: list[str] = module.params["pairs"]
    dest = Path(module.params["dest"])
    models = {pair: dashboard(pair, module.params["datasource_uid"]) for pair in pairs}
    problems = [
        f"{pair}: {problem}"
        for pair, model in models.items()
        for problem in check(model, pair, module.params["datasource_uid"])
    ]
    if problems:
        module.fail_json(msg="the dashboards fail their check: " + "; ".join(problems))
    changed = False
    written = []
    for pair, model in models.items():
        path = dest / f"pair-{pair}.json"
        changed |= write(path, json.dumps(model, indent=2) + "\n", module.check_mode)
        written.append(str(path))
        if module.params["queries_dest"]:
            queries = [{"title": title, "promql": expr} for title, expr in panel_queries(pair)]
            target = Path(module.params["queries_dest"]) / f"pair-{pair}.json"
            changed |= write(target, json.dumps(queries, indent=2) + "\n", module.check_mode)
    stale = sorted(
        str(path)
        for path in (dest.glob("pair-*.json") if dest.is_dir() else [])
        if path.name not in {f"pair-{pair}.json" for pair in pairs}
    )
    if stale and not module.check_mode:
        for path in stale:
            Path(path).unlink()
    uids = {pair: model["uid"] for pair, model in models.items()}
    module.exit_json(changed=changed or bool(stale), dashboards=written, uids=uids, removed=stale)


if __name__ == "__main__":
    main()
