"""Attach: one console over headless hosts started with --listen."""
