import os
import sys
from pathlib import Path

import fastlbp  # noqa: F401  (turns on float64)

sys.path.insert(0, os.path.dirname(__file__))

DATA = Path(__file__).parent / "data"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
