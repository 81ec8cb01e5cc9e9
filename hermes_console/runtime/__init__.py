"""The headless core of hermes-console (never imports Textual or the UI).

- ``host.RuntimeHost``: the live runtime (own thread + asyncio loop), implements ``api.RuntimeAPI``
- ``driver.Driver``: drives the env (groups, drain, cancel, phase switch) and accounts each item once
- ``intake.IntakeGate``: whether the next item may start (held by the operator, trainer link, phase switch)
- ``evaluation.Evaluations``: on-demand evaluation; ``trainer.TrainerLink``: serve mode's run-api link
- ``config`` / ``loader``: env reference, config_init -> YAML -> flags, both phases' server lists
- ``state.ConsoleState``: the pure reducer the UI, headless printer and replay share (views in ``views``)
- ``recorder`` / ``replay``: event logs (``--record``) and ``ReplaySource``
- ``headless.run_headless``: progress bar + summary front end

Submodules are imported on demand: importing this package stays cheap.
"""
