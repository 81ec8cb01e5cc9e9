"""Developer tools that are not part of the console: the README screenshot builder (a
scripted runtime over recorded event logs) and a stand-in trainer for run-api.

Run from a checkout (``python -m hermes_console_dev.screenshots``, ``python -m
hermes_console_dev.fake_trainer``). The product never imports this package (an
import-linter contract), and it is not installed with it.
"""
