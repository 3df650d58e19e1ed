"""Terminal colour for human output, with the exact escape sequences users' scripts may expect."""

from __future__ import annotations

from dataclasses import dataclass

_RESET = "\x1b[39m\x1b[0m"


@dataclass(frozen=True)
class Style:
    enabled: bool

    def _wrap(self, prefix: str, text: str) -> str:
        return f"{prefix}{text}{_RESET}" if self.enabled else text

    def label(self, text: str) -> str:
        return self._wrap("\x1b[1m\x1b[36m", text)

    def success(self, text: str) -> str:
        return self._wrap("\x1b[1m\x1b[32m", text)

    def warning(self, text: str) -> str:
        return self._wrap("\x1b[1m\x1b[33m", text)

    def failure(self, text: str) -> str:
        return self._wrap("\x1b[1m\x1b[91m", text)

    def path(self, text: str) -> str:
        return self._wrap("\x1b[4m\x1b[96m", text)

    def field(self, name: str, value: str) -> str:
        return f"{self.label(name)}: {value}"


def colour_enabled(choice: str, is_tty: bool, no_color: bool, machine_mode: bool = False) -> bool:
    """`--color` auto|always|never, NO_COLOR (present at all) and machine-readable output turn colour off."""
    if no_color or machine_mode or choice == "never":
        return False
    return choice == "always" or is_tty
