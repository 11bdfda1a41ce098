"""Interactive triage: label alarms one at a time, most likely first, with a durable journal.

    journal.py    the SQLite journal (settings and events), its checks, the graph's fingerprint
    lock.py       one process per session file (an flock naming its holder)
    stored.py     what a session stores (settings, a custom order, the fingerprint) and its checks
    explain.py    why an alarm has its probability (its strongest derivations)
    state.py      `Triage`: labels, skips, focus, undo, replay of the journal, rounds
    terminal.py   `Terminal`: the line-based command loop over a `Triage`

    t = Triage.open(model, default_session_path("race.json"), settings=Settings())
    Terminal(t).run()
"""

from fastlbp.triage.explain import Derivation, Explanation, explain, format_explanation
from fastlbp.triage.journal import (
    JOURNAL_VERSION,
    Journal,
    SessionWriteError,
    backup_path,
    default_session_path,
    fingerprint,
)
from fastlbp.triage.lock import SessionInUse, SessionLock
from fastlbp.triage.state import Outcome, RoundInfo, Triage
from fastlbp.triage.terminal import HELP, Terminal

__all__ = [
    "Triage", "Terminal", "Journal", "explain", "format_explanation", "default_session_path", "fingerprint",
    "Derivation", "Explanation", "Outcome", "RoundInfo", "JOURNAL_VERSION", "HELP", "SessionInUse",
    "SessionLock", "SessionWriteError", "backup_path",
]
