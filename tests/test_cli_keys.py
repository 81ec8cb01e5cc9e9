"""`--keys FILE` reaches the UI; a bad keymap stops before anything starts."""

from __future__ import annotations

from pathlib import Path

from hermes_console import cli


def test_bad_keymap_exits_2_with_the_offending_id(tmp_path: Path, capsys) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("not-a-binding: x\n")
    log = tmp_path / "events.jsonl"
    log.write_text("")
    assert cli.main(["replay", str(log), "--keys", str(keys)]) == 2
    err = capsys.readouterr().err
    assert "not-a-binding" in err and str(keys) in err


def test_keys_flag_is_accepted_by_every_ui_command() -> None:
    parser = cli.build_parser()
    for argv in (
        ["demo", "--keys", "k.yaml"],
        ["run", "env.py", "--keys", "k.yaml"],
        ["replay", "l.jsonl", "--keys", "k.yaml"],
    ):
        args, _ = parser.parse_known_args(argv)
        assert args.keys == "k.yaml"
