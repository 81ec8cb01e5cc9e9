"""Operator tools that are not part of the console itself (stand-ins for testing a setup)."""
