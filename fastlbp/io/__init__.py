"""Files in and out: loading every input format, the model cache, outputs, writers, SARIF, plots.
"""
