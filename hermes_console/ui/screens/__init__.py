"""Screens: the main console, drill-downs and modals."""
