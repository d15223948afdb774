"""A stand-in for nvidia-smi's ``--query-gpu`` (there is no GPU here), as strict as the real one.

It knows the fields a current driver (R535 and later) knows, among them clocks_event_reasons.*;
``driver: old`` makes it a driver before R535, which knows only clocks_throttle_reasons.*. A field
it does not know is refused as nvidia-smi refuses one: 'Field "<name>" is not a valid field to
query.' and a blank line on stdout, exit status 2. It prints the first GPU's values, comma and
space separated as nvidia-smi's CSV, from ``gpu.json`` beside it (a field without a value prints
[N/A], as nvidia-smi does for what the GPU cannot report). ``driver: absent`` answers as
nvidia-smi does without a loaded driver (exit status 9); ``delay_s`` makes it slow. Each call's
arguments are appended to ``calls`` beside it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REASONS = (
    "active",
    "supported",
    "gpu_idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
    "sync_boost",
)
COMMON = (
    "timestamp",
    "driver_version",
    "count",
    "name",
    "index",
    "uuid",
    "pstate",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "utilization.gpu",
    "clocks.sm",
    "clocks.current.sm",
    "clocks.max.sm",
)
# A GB10 under load, with the SW power cap holding its clocks (values as nvidia-smi prints them
# with nounits: watts with two decimals, the reasons as a 64-bit hex mask).
BUSY_GB10: dict[str, str] = {
    "name": "NVIDIA GB10",
    "driver_version": "580.95.05",
    "power.draw": "86.43",
    "temperature.gpu": "71",
    "utilization.gpu": "97",
    "clocks.sm": "2405",
    "clocks.max.sm": "3003",
    "clocks_event_reasons.active": "0x0000000000000004",
}

SCRIPT = r"""#!{python}
import json, sys, time
from pathlib import Path

here = Path(__file__).parent
try:  # the tests read the calls; on a lab host the exporter's sandbox makes the tree read-only
    with (here / "calls").open("a") as log:
        log.write(json.dumps(sys.argv[1:]) + "\n")
except OSError:
    pass
state = json.loads((here / "gpu.json").read_text())
if state.get("driver") == "absent":
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
          "Make sure that the latest NVIDIA driver is installed and running.")
    print()
    sys.exit(9)
time.sleep(state.get("delay_s", 0))
family = "clocks_throttle_reasons" if state.get("driver") == "old" else "clocks_event_reasons"
known = set({common}) | {{family + "." + reason for reason in {reasons}}}
query = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--query-gpu=")]
formats = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--format=")]
if len(query) != 1 or len(formats) != 1 or len(sys.argv) != 3:
    sys.exit("nvidia-smi stand-in: only --query-gpu=... --format=... is emulated")
if formats[0] != "csv,noheader,nounits":
    sys.exit("nvidia-smi stand-in: only --format=csv,noheader,nounits is emulated")
fields = query[0].split(",")
for name in fields:
    if name not in known:
        print(f'Field "{{name}}" is not a valid field to query.')
        print()
        sys.exit(2)
values = state["values"]
aliases = {{"clocks.current.sm": "clocks.sm"}}
shown = []
for name in fields:
    key = aliases.get(name, name).replace("clocks_throttle_reasons.", "clocks_event_reasons.")
    shown.append(values.get(key, "[N/A]"))
print(", ".join(shown))
"""


def install(
    directory: Path,
    values: dict[str, str] | None = None,
    python: str = sys.executable,
    **state: Any,
) -> Path:
    """Write the stand-in as ``directory/nvidia-smi`` with its state, run by ``python`` (a lab
    host's own for one copied there); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "nvidia-smi"
    path.write_text(
        SCRIPT.format(python=python, common=repr(COMMON), reasons=repr(REASONS)),
        encoding="utf-8",
    )
    path.chmod(0o755)
    set_state(path, values, **state)
    return path


def set_state(path: Path, values: dict[str, str] | None = None, **state: Any) -> None:
    document = {"values": dict(BUSY_GB10 if values is None else values), **state}
    path.with_name("gpu.json").write_text(json.dumps(document), encoding="utf-8")


def calls(path: Path) -> list[list[str]]:
    log = path.with_name("calls")
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
