"""What every benchmark result file records about the machine it ran on."""

from __future__ import annotations

import os
import platform
from typing import Any


def machine() -> dict[str, Any]:
    """Python, platform, CPU count and the load average when the measurement ended."""
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_at_end": [round(value, 2) for value in os.getloadavg()],
    }
