"""Soufflé's own test suite as a conformance check of `datalog.grounding` (test and benchmark code:
tests/test_souffle_suite.py, benchmarks/souffle_suite.py).

    results = souffle_conformance.run_suite("../shared/data/souffle-suite", jobs=2)
    summary = souffle_conformance.summarize(results)      # {"equal": n, "refused": {...}, ...}

The suite (`cases.json`: `id`, `program`, `facts`, `expected`) holds Soufflé's
programs as written, their input facts and Soufflé's output: one `REL.csv` per
`.output` relation (tab-separated, `()` for a nullary fact). A case is

* "equal": grounded, and for every `.output` relation the tuples the
  derivation graph holds for it (clause heads and input facts) are exactly
  the rows of its expected file (a program that derives nothing from its
  facts, which `fastlbp ground` refuses to write as a graph, has every output
  empty);
* "refused": the program or its facts were refused with an `InputError`
  (what a user sees as `error: FILE:LINE:COL: ...`, exit 2); `construct`
  names what was refused;
* "different": grounded, but some output relation differs (a bug);
* "crashed": any other exception (a bug); "timeout": past the time limit.

Each case runs in its own interpreter (`_main`, in a fresh `python -c`),
so a crash, a runaway grounding or a leak stays in that case.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import re
import subprocess
import sys
import traceback
from pathlib import Path

# (pattern in the message, construct): the first match names what a refusal refused.
_CONSTRUCTS = [
    (r"aggregate", "aggregate"),
    (r"component|qualified name|\.init|\.comp", "component"),
    (r"record|nil", "record"),
    (r"algebraic data type|ADT|'\$'", "ADT"),
    (r"user-defined functor|'@'", "user-defined functor"),
    (r"string (constraint|functor)|functor '(cat|strlen|substr|ord|to_number|to_string|match|contains)",
     "string functor"),
    (r"float", "float"),
    (r"unsigned", "unsigned"),
    (r"choice", "choice-domain"),
    (r"arithmetic|bitwise|functor", "arithmetic"),
    (r"disjunction", "disjunction"),
    (r"preprocessor|#include|#define", "preprocessor"),
    (r"I/O parameter|IO=", "I/O parameter"),
    (r"subsumption", "subsumption"),
    (r"autoinc", "autoinc"),
    (r"out of range", "number out of range"),
    (r"negated group", "disjunction"),
    (r"unsafe", "unsafe variable"),
    (r"type", "type"),
    (r"pragma", "pragma"),
    (r"qualifier", "relation qualifier"),
    (r"several heads", "several heads"),
    (r"negation through recursion", "unstratified negation"),
    (r"derives nothing", "derives nothing"),
    (r"no such file", "missing facts file"),
    (r"too large|rule instances", "grounding too large"),
]


def construct_of(message: str) -> str:
    """The construct a refusal's message names (a short label for counting); the message's
    `FILE:LINE:COL: ` prefix is left out (a path such as aggregates4/ names no construct)."""
    text = re.sub(r"^[^\n]*?:[0-9]+(:[0-9]+)?: ", "", message, count=1)
    for pattern, name in _CONSTRUCTS:
        if re.search(pattern, text):
            return name
    return "other"


@dataclasses.dataclass
class CaseResult:
    """One case's outcome: `status` (equal/refused/different/crashed/timeout) and what it says."""

    id: str
    status: str
    detail: str = ""
    construct: str = ""
    seconds: float = 0.0


def load_cases(suite: str | os.PathLike) -> list[dict]:
    return json.loads((Path(suite) / "cases.json").read_text())


def _expected(path: Path, rel: str) -> set[str]:
    """The tuple names (`rel(v1,...)`, as the derivation graph names tuples) of an expected csv."""
    out = set()
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line:
            continue
        out.add(f"{rel}()" if line == "()" else f"{rel}({','.join(line.split(chr(9)))})")
    return out


def _lines(names: set[str], rel: str) -> set[str]:
    """The non-empty lines Soufflé's csv file of these tuples holds (values joined by ',')."""
    return {line for name in names for line in name[len(rel) + 1:-1].split("\n") if line}


def check_case(suite: str | os.PathLike, case: dict, max_rule_instances: int = 5_000_000) -> CaseResult:
    """Grounds one case in this process and compares its output relations with Soufflé's."""
    import time

    from datalog import grounding, souffle
    from fastlbp.core.errors import InputError

    suite = Path(suite)
    t0 = time.perf_counter()
    try:
        program = souffle.parse_file(suite / case["program"])
        options = grounding.GroundOptions(facts=suite / case["facts"], max_rule_instances=max_rule_instances)
        dg = grounding.ground(program, options).graph
    except grounding.NothingDerived:
        # Grounded: every relation is empty, so there is no graph (`fastlbp ground` says so and stops);
        # the outputs are compared as empty.
        dg = None
    except InputError as err:
        return CaseResult(case["id"], "refused", str(err), construct_of(str(err)), time.perf_counter() - t0)
    except Exception:  # noqa: BLE001  (a crash is a finding, reported with its traceback)
        return CaseResult(case["id"], "crashed", traceback.format_exc(), "", time.perf_counter() - t0)
    got: dict[str, set[str]] = {rel: set() for rel in program.outputs}
    for t in [] if dg is None else dg.alarms.tolist():
        name = dg.tuples[t]
        got.setdefault(name[:name.index("(")], set()).add(name)
    problems = []
    for rel in program.outputs:
        file = program.output_files.get(rel, f"{rel}.csv") if hasattr(program, "output_files") else \
            f"{rel}.csv"
        path = suite / case["expected"] / file
        if not path.exists():
            problems.append(f"{rel}: no expected {file}")
            continue
        want = _expected(path, rel)
        if want != got[rel] and any("\n" in name for name in got[rel]):
            # Soufflé writes a symbol as it is, so one holding a line break spans lines of the file:
            # then the file's lines are compared with the lines our tuples would make.
            want, got[rel] = (_lines(want, rel), _lines(got[rel], rel))
        if want != got[rel]:
            missing, extra = sorted(want - got[rel])[:3], sorted(got[rel] - want)[:3]
            problems.append(f"{rel}: {len(want)} expected, {len(got[rel])} grounded; missing {missing}, "
                            f"extra {extra}")
    seconds = time.perf_counter() - t0
    if problems:
        return CaseResult(case["id"], "different", "; ".join(problems), "", seconds)
    return CaseResult(case["id"], "equal", "", "", seconds)


def run_case(suite: str | os.PathLike, case: dict, timeout: float = 120.0,
             max_rule_instances: int = 5_000_000) -> CaseResult:
    """`check_case` in a fresh interpreter, stopped after `timeout` seconds."""
    root, here = str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)
    # This checkout's packages first, passed as an argument (the library reads no environment variable).
    start = (f"import sys; sys.path[:0] = [{root!r}, {here!r}]; "
             "from souffle_conformance import _main; _main(sys.argv[1:])")
    try:
        done = subprocess.run([sys.executable, "-c", start, str(suite), case["id"], str(max_rule_instances)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return CaseResult(case["id"], "timeout", f"no result in {timeout:.0f} s", "", timeout)
    lines = done.stdout.strip().split("\n")
    try:
        return CaseResult(**json.loads(lines[-1]))
    except (json.JSONDecodeError, TypeError):
        return CaseResult(case["id"], "crashed", f"exit {done.returncode}: {done.stderr[-2000:]}")


def run_suite(suite: str | os.PathLike, jobs: int = 2, timeout: float = 120.0,
              only: list[str] | None = None, max_rule_instances: int = 5_000_000) -> list[CaseResult]:
    """Every case (or those of `only`), `jobs` at a time; results in the order of cases.json. A grounding
    past `max_rule_instances` is refused ("grounding too large")."""
    cases = [c for c in load_cases(suite) if only is None or c["id"] in only]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(lambda c: run_case(suite, c, timeout, max_rule_instances), cases))


def summarize(results: list[CaseResult]) -> dict:
    """Counts: equal, refused (by construct), different, crashed, timeout."""
    out = {"cases": len(results), "equal": 0, "refused": 0, "different": 0, "crashed": 0, "timeout": 0,
           "refused_by": {}}
    for r in results:
        out[r.status] += 1
        if r.status == "refused":
            out["refused_by"][r.construct] = out["refused_by"].get(r.construct, 0) + 1
    out["refused_by"] = dict(sorted(out["refused_by"].items(), key=lambda kv: -kv[1]))
    return out


def _main(argv: list[str]) -> None:
    suite, case_id, limit = argv
    case = next(c for c in load_cases(suite) if c["id"] == case_id)
    print(json.dumps(dataclasses.asdict(check_case(suite, case, int(limit)))))


if __name__ == "__main__":
    _main(sys.argv[1:])
