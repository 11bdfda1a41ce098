"""Hostile Datalog programs and facts: random mutations through parsing and grounding, counting tracebacks.

    python benchmarks/reliability_datalog.py --cases 2000 --seed 1

Each case takes the shipped taint analysis (data/taint/taint.dl and its facts) and applies one or two
mutations to the program or to a facts file: a byte flipped, deleted or duplicated, the text cut short,
or a hostile snippet inserted at a random place (huge and leading-zero numbers, non-ASCII digits, NUL,
long symbols, aggregates, functors, I/O parameters, declarations without commas, deep parentheses).
Then `datalog.grounding.ground_file` runs with a limit of 200,000 rule instances. An outcome is a
graph, a clean `InputError` (the user's error: file, line and message), or anything else: a traceback
a user would see, printed here with its case. The last line is the table.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from datalog import grounding  # noqa: E402
from fastlbp.core.errors import InputError  # noqa: E402

SNIPPETS = [
    "007", "-007", "9" * 60, "0x" + "f" * 30, "\u0661", "\u0662\u0663", "\0", '"a\0b"',
    '"' + "x" * 70_000 + '"',
    "count : { r(_) }", "sum x : r(x)", "match(\"a.*\", x)", "contains(\"a\", x)", "(IO=stdout)", "()",
    ".input r r\n", ".output r(IO=file)\n", ".decl a, b(x:number)\n", "((((((((((", "))))", "@f(x)", "$A(1)",
    "[1, 2]", "x + 1", "1.5", "\"unterminated", "/* open comment", "!", "!!", ":-", ".", ",", "_", "\t",
    "\r\n", "\u202e", "\x1b]0;t\x07", ".pragma \"a\" \"b\"\n", ".type T <: symbol\n", "#include \"x\"\n",
    # issue 41: expansions and functors that had no bound
    "#error x\n", "#include \"taint.dl\"\n", "#define A (A+A)\n", "(" * 3000, "-" * 3000,
    " ; ".join(["x = 1"] * 5000),
    "range(0, 2147483647)", "cat(x, x)", "match(\"(a+)+$\", x)", "match(\"(a)\\\\1\", x)", "x / y", "x % y",
    "-2147483648 / -1", "to_number(\"99999999999999\")", ".comp A {\n.init a = A\n}\n.init z = A\n",
]


def mutate(text: str, rng: random.Random) -> str:
    kind = rng.randrange(5)
    if not text:
        return rng.choice(SNIPPETS)
    i = rng.randrange(len(text) + 1)
    if kind == 0:  # flip a byte of the UTF-8 encoding (decoded leniently: invalid UTF-8 is an input)
        data = bytearray(text.encode("utf-8", errors="surrogateescape"))
        j = rng.randrange(len(data))
        data[j] ^= 1 << rng.randrange(8)
        return data.decode("utf-8", errors="surrogateescape")
    if kind == 1:
        return text[:i] + text[i + rng.randrange(1, 20):]
    if kind == 2:
        j = rng.randrange(len(text))
        return text[:i] + text[j:j + rng.randrange(1, 40)] + text[i:]
    if kind == 3:
        return text[:i]
    return text[:i] + rng.choice(SNIPPETS) + text[i:]


def run_case(workdir: Path, rng: random.Random) -> str:
    src = ROOT / "data" / "taint"
    shutil.copytree(src / "facts", workdir / "facts")
    program = workdir / "taint.dl"
    text = (src / "taint.dl").read_text(encoding="utf-8")
    if rng.random() < 0.6:
        text = mutate(text, rng)
        if rng.random() < 0.3:
            text = mutate(text, rng)
    else:
        facts = sorted((workdir / "facts").glob("*.facts"))
        victim = rng.choice(facts)
        victim.write_bytes(mutate(victim.read_text(encoding="utf-8"), rng).encode("utf-8",
                                                                                 errors="surrogateescape"))
    program.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    try:
        grounding.ground_file(program, grounding.GroundOptions(facts=workdir / "facts",
                                                              max_rule_instances=200_000))
        return "graph"
    except InputError:
        return "clean error"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    counts = {"graph": 0, "clean error": 0, "traceback": 0}
    start = time.perf_counter()
    for case in range(args.cases):
        rng = random.Random(args.seed * 1_000_003 + case)
        with tempfile.TemporaryDirectory(prefix="fastlbp-hostile-") as tmp:
            try:
                counts[run_case(Path(tmp), rng)] += 1
            except Exception:  # noqa: BLE001  (what this campaign counts)
                counts["traceback"] += 1
                print(f"case {case}: traceback", file=sys.stderr)
                traceback.print_exc(limit=3)
    seconds = time.perf_counter() - start
    print(f"{args.cases} cases (seed {args.seed}) in {seconds:.0f} s: {counts['graph']} graphs, "
          f"{counts['clean error']} clean errors, {counts['traceback']} tracebacks")


if __name__ == "__main__":
    main()
