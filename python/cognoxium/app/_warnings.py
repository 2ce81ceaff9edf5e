"""How the command prints the package's own warnings: light, for ``cognoxium --help`` too."""

from __future__ import annotations

import warnings

from cognoxium.exceptions import OrderWarning

__all__ = ["plain_warnings"]


def plain_warnings() -> None:
    """Print the package's own warnings as ``warning: <message>`` lines on standard error.

    Python prints a warning after the source line that raised it; for a
    command's user that is a line of the command-line library, not of their
    input. Other warnings keep Python's form.
    """
    default = warnings.formatwarning

    def formatted(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        line: str | None = None,
    ) -> str:
        if issubclass(category, OrderWarning):
            return f"warning: {message}\n"
        return default(message, category, filename, lineno, line)

    warnings.formatwarning = formatted
