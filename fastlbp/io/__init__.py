"""Files in and out, above inference: loading every input format (with the model cache), ranking writers,
SARIF and plots. Low-level helpers (atomic writing, text escaping) are in `fastlbp.core`.
"""
