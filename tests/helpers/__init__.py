"""Helpers shared by every test folder. Import them as ``from tests.helpers.<module> import ...``."""
