"""fastlbp's version, written once: the package's `__version__`, `--version`, the model cache's keys and
SARIF's tool version read it here (modules below the package's front door cannot import the front door)."""

__version__ = "0.1.0"
