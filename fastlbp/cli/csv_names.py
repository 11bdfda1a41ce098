"""`--csv-exact-names`, declared once for the commands that write CSV (`rank`, `marginals`).

Both write CSV through `fastlbp.io.writers.csv_document`: fields quoted as RFC 4180
says, and by default a name a spreadsheet would run as a formula marked with a
leading `'` (`fastlbp.io.writers.csv_name`).
"""

from __future__ import annotations

from typing import Annotated

import typer

CSV_EXACT_NAMES_HELP = (
    "With --format csv, write every name exactly as it is. By default a name beginning with = + - @, a tab "
    "or a carriage return (a formula to a spreadsheet), or with ', gets a leading ' (OWASP's advice against "
    "CSV injection); dropping one leading ' reads the name back.")

CsvExactNamesOpt = Annotated[bool, typer.Option("--csv-exact-names", help=CSV_EXACT_NAMES_HELP)]
