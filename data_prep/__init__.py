"""Command-line data tools: ``python -m data_prep.NAME``."""
