"""What every benchmark result file records about the machine it ran on."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    """Python, platform, CPU count and the load average when the measurement ended."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(value, 2) for value in os.getloadavg()],
    }


def result_rows(measured: dict[str, float], targets: dict[str, float], version: float | None = None) -> list[dict]:
    """One result row per measured figure: seconds, its ratio to `sbuf --version` (given that time) and
    whether it meets its target (None when it has none)."""
    return [
        {
            "name": name,
            "seconds": round(value, 4),
            **({"ratio_to_version": round(value / version, 2)} if version else {}),
            "target_s": targets.get(name),
            "meets_target": None if name not in targets else value <= targets[name],
        }
        for name, value in measured.items()
    ]


def save(path: Path, report: dict[str, Any]) -> None:
    """Write `report`, with the machine and the time it ended, to `path` as JSON, and say where."""
    report = report | {"machine": machine(), "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"saved {path}")
