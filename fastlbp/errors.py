"""Errors a user can act on: each names the file, the line and the problem."""

from __future__ import annotations


class InputError(ValueError):
    """Bad input: `path`, `line` (1-based, or None) or a JSON `location`, and a message."""

    def __init__(self, path: str | None, line: int | None, message: str, location: str | None = None):
        self.path = path
        self.line = line
        self.location = location
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = str(self.path) if self.path else "<input>"
        if self.line is not None:
            where += f":{self.line}"
        if self.location:
            where += f": at {self.location}"
        return f"{where}: {self.message}"


class ContradictoryEvidence(ValueError):
    """The labels have joint probability 0 under the model; `labels` names a conflicting set."""

    def __init__(self, labels: dict[str, bool]):
        self.labels = dict(labels)
        shown = ", ".join(f"{k}={'true' if v else 'false'}" for k, v in self.labels.items())
        super().__init__(f"contradictory labels (joint probability 0): {shown}")


class SettingsError(ValueError):
    """An option value out of range or unknown (a backend, a precision, ...)."""


def read_text(path) -> str:
    """A UTF-8 text file's contents; unreadable or non-UTF-8 files raise `InputError` naming the file."""
    from pathlib import Path

    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise InputError(str(p), None, f"not valid UTF-8 ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise InputError(str(p), None, err.strerror or str(err)) from None
