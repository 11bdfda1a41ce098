"""Interactive triage: label alarms one at a time, most likely first, with a durable journal.

    journal_format.py   the journal's tables, versions and kinds of event, the graph's fingerprint
    journal_reading.py  a session file read as it is and checked; the errors that say what is wrong
    journal.py          `Journal`: the SQLite journal (settings and events) created, opened, written
    lock.py             one process per session file (an flock naming its holder)
    stored.py           what a session stores (settings, a custom order, the fingerprint), its checks
    evidence.py         what a session starts from: carried labels and soft evidence, online learning
    carry.py            labels given on an older version of the graph, carried to this one
    paths.py            where a session lives: the data folder, named after the graph and its content
    state.py            `Triage`: labels, skips, focus, undo, rounds, with the mixins of
    state_opening.py        open (new, resumed, recovered) and close,
    state_replay.py         the journal's events replayed, the snapshot stored and restored,
    state_settings.py       settings changes
    outcome.py          what an action did (`Outcome`) and how its round went (`RoundInfo`)
    snapshot.py         what a resume needs besides the events to restore a session in one round
    labels.py           a session's labels as a labels file (export), a session file read as labels
    lineinput.py        line editing and history on a terminal
    terminal.py         `Terminal`: the command loop over a `Triage`

Why an alarm has its probability (`explain`) is `fastlbp.inference.explain`'s, named here too.

    t = Triage.open(model, default_session_path("race.json", folder), settings=Settings())
    Terminal(t).run()
"""

from fastlbp.inference.explain import Derivation, Explanation, explain, format_explanation
from fastlbp.triage.journal import Journal, SessionWriteError
from fastlbp.triage.journal_format import JOURNAL_VERSION, fingerprint
from fastlbp.triage.journal_reading import backup_path
from fastlbp.triage.labels import read_labels_or_session, session_labels, write_labels
from fastlbp.triage.lock import SessionInUse, SessionLock
from fastlbp.triage.outcome import Outcome, RoundInfo
from fastlbp.triage.paths import default_session_path, legacy_session_path, locate
from fastlbp.triage.state import Triage
from fastlbp.triage.terminal import HELP, Terminal

__all__ = [
    "Triage", "Terminal", "Journal", "explain", "format_explanation", "default_session_path", "fingerprint",
    "Derivation", "Explanation", "Outcome", "RoundInfo", "JOURNAL_VERSION", "HELP", "SessionInUse",
    "SessionLock", "SessionWriteError", "backup_path", "legacy_session_path", "locate", "session_labels",
    "write_labels", "read_labels_or_session",
]
