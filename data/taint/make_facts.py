"""Writes facts/*.facts for taint.dl: the statements of a small, made-up Java web application.

    python data/taint/make_facts.py          # rewrites data/taint/facts/ (deterministic, seed 7)

Sixteen servlet handlers read request parameters and headers (sources), pass
them through string operations, sanitizers and shared objects (the session,
a DAO, a cache: heap fields that the handlers share), and reach SQL queries,
shell commands, file writes and HTML output (sinks). Each fact is a line of
tab-separated fields, as Soufflé writes them; names are `Class.method/var`
for variables, `Class.method/line` for call sites and `...@site` for
allocation sites, so an alarm `leak(Search.doGet/31,Search.doGet/v4)` says
where to look.
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

HANDLERS = ["Login", "Logout", "Search", "Profile", "Admin", "Upload", "Report", "Comment", "Export",
            "Settings", "Invite", "Feed", "Checkout", "Cart", "Reset", "Audit"]
SOURCES = ["HttpServletRequest.getParameter", "HttpServletRequest.getHeader", "Cookie.getValue"]
SINKS = {"Statement.executeQuery": 0, "Runtime.exec": 0, "PrintWriter.print": 0, "Files.write": 0,
         "Logger.info": 0}
SANITIZERS = {"Encoder.escapeHtml": 0, "Sql.quote": 0, "Paths.normalize": 0}
LIBRARY = {"String.concat": 2, "String.trim": 1, "String.format": 3, "StringBuilder.append": 2,
           "Integer.parseInt": 1, "Map.get": 2}
SHARED = {"session": ["user", "query", "lastSearch"], "dao": ["sql", "table"], "cache": ["entry", "key"]}


class _Handler:
    """One handler method's statements, appended to `facts`."""

    def __init__(self, method: str, facts: dict[str, list[tuple]], rng: random.Random):
        self.method, self.facts, self.rng = method, facts, rng
        self.line, self.count = 10, 0

    def var(self) -> str:
        self.count += 1
        return f"{self.method}/v{self.count}"

    def site(self) -> str:
        self.line += self.rng.randint(1, 4)
        return f"{self.method}/{self.line}"

    def call(self, m: str, args: list[str], result: bool = True) -> str | None:
        c = self.site()
        self.facts["call"].append((c, m))
        for i, a in enumerate(args):
            self.facts["arg"].append((c, i, a))
        if not result:
            return None
        v = self.var()
        self.facts["ret"].append((c, v))
        return v


def make(seed: int = 7) -> dict[str, list[tuple]]:
    rng = random.Random(seed)
    facts: dict[str, list[tuple]] = defaultdict(list)
    facts["source"] = [(m,) for m in SOURCES]
    facts["sink"] = sorted(SINKS.items())
    facts["sanitizer"] = sorted(SANITIZERS.items())
    for h in HANDLERS:
        f = _Handler(f"{h}.{rng.choice(['doGet', 'doPost'])}", facts, rng)
        req = f"{f.method}/req"
        facts["new"].append((req, "Container@request"))
        shared = {}
        for obj in rng.sample(sorted(SHARED), k=rng.randint(1, 3)):
            v = f"{f.method}/{obj}"
            if obj == "cache":  # through a static field: one more step of points-to
                facts["assign"].append((v, "App/cache"))
            else:
                facts["new"].append((v, f"Container@{obj}"))
            shared[obj] = v
        pool: list[str] = []
        for _ in range(rng.randint(12, 22)):
            op = rng.choices(["source", "const", "lib", "sanitize", "assign", "store", "load", "sink"],
                             weights=[3, 2, 4, 2, 2, 3, 3, 3])[0]
            if op == "source" or not pool:
                pool.append(f.call(rng.choice(SOURCES), [req]))
            elif op == "const":
                v = f.var()
                facts["new"].append((v, f"{f.method}/str@{f.line}"))
                pool.append(v)
            elif op == "lib":
                m = rng.choice(sorted(LIBRARY))
                pool.append(f.call(m, [rng.choice(pool) for _ in range(LIBRARY[m])]))
            elif op == "sanitize":
                pool.append(f.call(rng.choice(sorted(SANITIZERS)), [rng.choice(pool)]))
            elif op == "assign":
                v = f.var()
                facts["assign"].append((v, rng.choice(pool)))
                pool.append(v)
            elif op in ("store", "load") and shared:
                obj = rng.choice(sorted(shared))
                field = rng.choice(SHARED[obj])
                if op == "store":
                    facts["store"].append((shared[obj], field, rng.choice(pool)))
                else:
                    v = f.var()
                    facts["load"].append((v, shared[obj], field))
                    pool.append(v)
            elif op == "sink":
                f.call(rng.choice(sorted(SINKS)), [rng.choice(pool[-4:])], result=False)
    facts["assign"].append(("App/cache", "App/cacheInit"))
    facts["new"].append(("App/cacheInit", "Container@cache"))
    # Where each call site is in the (made-up) source: `fastlbp ground --locations callAt` locates every
    # tuple that names a call site there (SARIF results with a file and line).
    facts["callAt"] = [(c, f"src/main/java/app/{c.split('.')[0]}.java", int(c.rsplit("/", 1)[1]))
                       for c, _ in facts["call"]]
    return {rel: sorted(set(rows), key=str) for rel, rows in facts.items()}


def write(directory: Path, seed: int = 7) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for rel, rows in make(seed).items():
        (directory / f"{rel}.facts").write_text("".join("\t".join(map(str, r)) + "\n" for r in rows))
    for rel in ("new", "assign", "load", "store", "call", "arg", "ret", "source", "sink", "sanitizer",
                "callAt"):
        (directory / f"{rel}.facts").touch()


if __name__ == "__main__":
    write(Path(__file__).with_name("facts"))
