#!/usr/bin/python
"""Check the rendered provisioning files and dashboards before Grafana is given them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.pair_dashboards.dashboard import check

DOCUMENTATION = r"""
module: pair_dashboards_check
short_description: Check a rendered Grafana provisioning tree of the dualspark dashboards
description:
  - Reads root/provisioning/datasources/prometheus.yml (one Prometheus datasource with the uid
    and url given), root/provisioning/dashboards/dualspark.yml (one file provider reading
    dashboards_dir) and root/dashboards/pair-<name>.json, one per pair and no other, each held
    to the dashboards' own check (uid, datasource, known metric names, the pair's selector in
    every query). Fails with every problem found; changes nothing.
options:
  root:
    description: The rendered tree.
    type: path
    required: true
  pairs:
    description: The pairs there must be a dashboard for.
    type: list
    elements: str
    required: true
  datasource_uid:
    description: UID of the datasource.
    type: str
    required: true
  prometheus_url:
    description: URL of the datasource.
    type: str
    required: true
  dashboards_dir:
    description: Directory the provider must read on the Grafana host.
    type: str
    required: true
"""

RETURN = r"""
dashboards:
  description: The dashboards checked, by pair (uid, title, panels, queries).
  type: dict
  returned: always
lines:
  description: One line per dashboard checked, for the play's report.
  type: list
  elements: str
  returned: success
"""


def datasource_problems(path: Path, uid: str, url: str) -> list[str]:
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    sources = document.get("datasources") or []
    if document.get("apiVersion") != 1 or len(sources) != 1:
        return [f"{path}: not one datasource of provisioning apiVersion 1"]
    (source,) = sources
    wanted = {"uid": uid, "type": "prometheus", "url": url, "access": "proxy"}
    return [
        f"{path}: {key} is {source.get(key)!r}, not {value!r}"
        for key, value in wanted.items()
        if source.get(key) != value
    ]


def provider_problems(path: Path, dashboards_dir: str) -> list[str]:
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    providers = document.get("providers") or []
    if document.get("apiVersion") != 1 or len(providers) != 1:
        return [f"{path}: not one dashboard provider of provisioning apiVersion 1"]
    (provider,) = providers
    problems = []
    if provider.get("type") != "file":
        problems.append(f"{path}: the provider is not of type file")
    if (provider.get("options") or {}).get("path") != dashboards_dir:
        problems.append(f"{path}: the provider does not read {dashboards_dir}")
    return problems


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "pairs": {"type": "list", "elements": "str", "required": True},
            "datasource_uid": {"type": "str", "required": True},
            "prometheus_url": {"type": "str", "required": True},
            "dashboards_dir": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    root = Path(params["root"])
    problems: list[str] = []
    source = root / "provisioning/datasources/prometheus.yml"
    provider = root / "provisioning/dashboards/dualspark.yml"
    for path in (source, provider):
        if not path.is_file():
            problems.append(f"{path}: missing")
    if not problems:
        problems += datasource_problems(source, params["datasource_uid"], params["prometheus_url"])
        problems += provider_problems(provider, params["dashboards_dir"])
    found = {path.name for path in (root / "dashboards").glob("*.json")}
    wanted = {f"pair-{pair}.json" for pair in params["pairs"]}
    problems += [f"dashboards/{name}: no such pair" for name in sorted(found - wanted)]
    problems += [f"dashboards/{name}: missing" for name in sorted(wanted - found)]
    checked: dict[str, Any] = {}
    for pair in params["pairs"]:
        path = root / f"dashboards/pair-{pair}.json"
        if not path.is_file():
            continue
        model = json.loads(path.read_text(encoding="utf-8"))
        problems += [f"{path.name}: {p}" for p in check(model, pair, params["datasource_uid"])]
        panels = [p for p in model.get("panels", []) if p.get("type") != "row"]
        checked[pair] = {
            "uid": model.get("uid"),
            "title": model.get("title"),
            "panels": len(panels),
            "queries": sum(len(p.get("targets", [])) for p in panels),
        }
    if problems:
        module.fail_json(msg="; ".join(problems), dashboards=checked)
    lines = [
        f"{pair}: {d['title']!r} (uid {d['uid']}), {d['panels']} panels, {d['queries']} queries"
        for pair, d in checked.items()
    ]
    module.exit_json(changed=False, dashboards=checked, lines=lines)


if __name__ == "__main__":
    main()
