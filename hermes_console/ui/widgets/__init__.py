"""One widget per module; each renders one slice of ConsoleState."""
