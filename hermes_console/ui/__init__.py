"""Textual operations console: renders ConsoleState, sends RuntimeAPI commands."""
