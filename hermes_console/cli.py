"""``hermes-console``: demo | run ENV | replay LOG | sim.

hermes-console demo [--headless] [--record FILE]
hermes-console run path/to/env.py[:Class] [--mode process|serve|evaluate] [--config cfg.yaml]
               [--env.group_size 8 --openai.base_url URL ...] [--headless] [--record FILE]
hermes-console replay events.jsonl[.gz] [--speed 10] [--headless]
hermes-console attach ADDR [ADDR ...] [--token-file FILE]   (hosts started with run --listen ADDR)
hermes-console sim [--port 9001 ...]
hermes-console check-data groups.jsonl [--tokenizer DIR] [--tools toolsets] [--group-size N]
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from hermes_console.runtime.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from hermes_console.runtime.api import RuntimeAPI
    from hermes_console.runtime.config import RunSpec

DEMO_FAULTS = {"http_500": 0.02, "malformed_tool_json": 0.03, "unknown_tool": 0.02}
DEMO_ENV = "environments.terminal_tasks"
DEMO_RUN_PREFIX = "terminal-tasks"  # the demo env's name: its run dirs are terminal-tasks-<stamp>


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (flag, value, what is expected), exit 2, no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _number(kind: type, minimum: float, strict: bool = False) -> Any:
    """An argparse type: ``kind`` (int/float) >= ``minimum`` (> when ``strict``), finite."""
    what = "a whole number" if kind is int else "a number"
    expect = f"expected {what} {'>' if strict else '>='} {minimum:g}"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{expect}, got {text!r}") from None
        if value != value or value in (float("inf"), float("-inf")) or value < minimum or (strict and value == minimum):
            raise argparse.ArgumentTypeError(f"{expect}, got {text!r}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _check_record_path(path: str | None) -> None:
    """``--record`` must be a file we can create, checked before anything starts."""
    if not path:
        return
    target = Path(path).expanduser()
    if target.is_dir():
        raise UsageError(
            f"--record {path!r}: is a directory; expected a file path such as {path.rstrip('/')}/events.jsonl.gz"
        )
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise UsageError(
            f"--record {path!r}: cannot be written ({exc.strerror or exc}); "
            "expected a file path in a writable directory"
        ) from None


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--headless", action="store_true", help="no UI: progress bar and a final summary")
    p.add_argument("--record", metavar="FILE", help="write every event to FILE (JSON lines; .gz to compress)")
    p.add_argument(
        "--drain-deadline",
        type=_number(float, 0),
        default=10.0,
        metavar="S",
        help="on stop, wait this long for in-flight groups before cancelling them (default 10)",
    )
    p.add_argument(
        "--sigterm-exit-code",
        type=_number(int, 0),
        default=0,
        metavar="N",
        help="headless: exit code after a SIGTERM that drained with nothing lost (default 0; "
        "143 makes a Kubernetes Job retry the shard)",
    )
    _keys_flag(p)


def _keys_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--keys", metavar="FILE", help="YAML keymap: binding id -> key (default ~/.config/hermes-console/keys.yaml)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="hermes-console", description="An operations console for Atropos RL environments.")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="embedded simulator (with some faults) + the terminal_tasks env")
    _common(demo)
    demo.add_argument("--total-steps", type=_number(int, 1), default=100_000, help="groups to process (default 100000)")
    demo.add_argument("--latency-ms", type=_number(float, 0), default=300.0, help="simulated mean latency (lognormal)")
    demo.add_argument("--no-faults", action="store_true", help="turn the simulator's injected faults off")
    demo.add_argument("--runs-dir", default="runs")
    demo.add_argument(
        "--keep-runs",
        type=_number(int, 0),
        default=10,
        metavar="N",
        help="keep the newest N demo run dirs under --runs-dir, delete older ones (0: keep all; default 10)",
    )

    run = sub.add_parser(
        "run",
        help="run an env: path/to/env.py[:Class] or package.module[:Class]",
        epilog="Other flags are atropos-style config overrides: --env.<field> V, --openai.<field> V, --phase2.<field> V.",
    )
    run.add_argument("env", help="path/to/env.py[:Class] or package.module[:Class]")
    run.add_argument("--mode", choices=("process", "serve", "evaluate"), default="process")
    run.add_argument("--config", metavar="YAML", help="YAML with env:, openai: (dict or list), phase2: keys")
    run.add_argument(
        "--phase",
        type=int,
        choices=(1, 2),
        default=None,
        help="start in phase 1 (chat) or 2 (token-level); default: what the env's server_type implies",
    )
    run.add_argument(
        "--max-in-flight",
        type=_number(int, 1),
        default=None,
        help="groups in flight at once (default: env max_num_workers)",
    )
    run.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="take every N-th item starting at I (default: from SLURM_ARRAY_TASK_ID/COUNT, "
        "SLURM_PROCID/NTASKS, JOB_COMPLETION_INDEX/HERMES_SHARD_COUNT or RANK/WORLD_SIZE)",
    )
    run.add_argument("--runs-dir", default="runs", help="where run directories are created (default runs/)")
    run.add_argument("--no-server-check", action="store_true", help="skip the reachability check of loopback servers")
    run.add_argument(
        "--listen",
        metavar="ADDR",
        default=None,
        help="serve events, controls and /metrics on unix:PATH or [HOST:]PORT (port 0 = any; "
        "host defaults to 127.0.0.1); for `hermes-console attach`",
    )
    run.add_argument(
        "--listen-token-file",
        metavar="FILE",
        default=None,
        help="token for --listen: required for controls and for reads from other machines",
    )
    _common(run)

    replay = sub.add_parser("replay", help="replay a recorded event log (read-only)")
    replay.add_argument("log")
    replay.add_argument(
        "--speed",
        type=_number(float, 0, strict=True),
        default=None,
        help="1.0 = real time; default: everything at once",
    )
    replay.add_argument("--headless", action="store_true")
    _keys_flag(replay)

    attach = sub.add_parser("attach", help="one console over headless hosts started with --listen")
    attach.add_argument(
        "addresses",
        nargs="+",
        metavar="ADDR",
        help="unix:PATH or HOST:PORT of a host's --listen (NAME=ADDR to name it)",
    )
    attach.add_argument("--token-file", metavar="FILE", default=None, help="the hosts' --listen-token-file")
    _keys_flag(attach)

    sub.add_parser("sim", help="run the inference simulator (see `hermes-console sim --help`)", add_help=False)
    sub.add_parser(
        "check-data", help="verify a groups JSONL against the data contract (see `check-data --help`)", add_help=False
    )
    sub.add_parser("images", help="build/list/remove/export sandbox images (see `images --help`)", add_help=False)
    return parser


def wait_for_stop(runtime: RuntimeAPI, drain_deadline_s: float, cleanup_grace_s: float = 60.0) -> bool:
    """Stop the runtime and wait for its cleanup; True when it finished. Never raises."""
    import concurrent.futures

    try:
        future = runtime.stop(drain_deadline_s)
        try:
            future.result(timeout=1.0)
        except concurrent.futures.TimeoutError:
            print("hermes-console: waiting for the runtime to drain and clean up sandboxes…", file=sys.stderr)
            future.result(timeout=drain_deadline_s + cleanup_grace_s)
    except concurrent.futures.TimeoutError:
        print(
            f"hermes-console: the runtime did not finish stopping within {drain_deadline_s + cleanup_grace_s:g}s; "
            "leaving anyway (sandboxes are swept by the next start)",
            file=sys.stderr,
        )
        return False
    except concurrent.futures.CancelledError:
        print("hermes-console: the runtime's stop was cancelled before it finished", file=sys.stderr)
        return False
    except Exception as exc:  # noqa: BLE001 - the run's own error was already reported
        print(f"hermes-console: stopping the runtime failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return False
    finally:
        runtime.join(10.0)
    return True


def _front_end(
    runtime: RuntimeAPI,
    headless: bool,
    drain_deadline_s: float,
    keys_file: str | None = None,
    sigterm_exit_code: int = 0,
) -> int:
    if not headless:
        from hermes_console.ui.app import run_console
        from hermes_console.ui.config import KeymapError, load_console_config

        try:
            config = load_console_config(Path(keys_file) if keys_file else None)
        except KeymapError as exc:
            print(f"hermes-console: {exc}", file=sys.stderr)
            return 2
        else:
            config.drain_deadline_s = drain_deadline_s  # the UI's quit drains this long (--drain-deadline)
            result = 1
            try:
                result = run_console(runtime, config=config)
            finally:
                # The UI stops the runtime when the operator quits; make sure of it (and of its
                # cleanup) on any exit, even when the operator left the screen early.
                stopped = wait_for_stop(runtime, drain_deadline_s)
            fatal = getattr(runtime, "fatal", None)
            if fatal is not None:  # the screen is gone: say why the run ended, as headless does
                from environments.redact import redact
                from hermes_console.runtime.headless import EXIT_FATAL

                print(f"hermes-console: error: {redact(str(fatal))}", file=sys.stderr)
                return EXIT_FATAL
            return int(result or 0) if stopped else 1
    from hermes_console.runtime import gc_tuning
    from hermes_console.runtime.headless import run_headless

    with gc_tuning.tuned():  # this process is the run's, as the console's is (gc_tuning)
        return run_headless(
            runtime, drain_deadline_s=drain_deadline_s, sigterm_exit_code=sigterm_exit_code, freeze_gc_when_loaded=True
        )


def _run(args: argparse.Namespace, extra: list[str]) -> int:
    from hermes_console.runtime.config import RunSpec
    from hermes_console.runtime.flags import check_flag_values, parse_flags
    from hermes_console.runtime.host import RuntimeHost

    parse_flags(extra)  # syntax errors now, before anything starts
    check_flag_values(extra)
    _check_record_path(args.record)
    spec = RunSpec(
        env=args.env,
        mode=args.mode,
        config_path=args.config,
        flags=extra,
        phase=args.phase,
        max_in_flight=args.max_in_flight,
        shard=args.shard,
        runs_dir=args.runs_dir,
        record_path=args.record,
        check_server=not args.no_server_check,
    )
    host = RuntimeHost(spec, exit_when_finished=args.headless)
    if not args.listen:
        if args.listen_token_file:
            raise UsageError("--listen-token-file needs --listen ADDR (where to serve events and controls)")
        return _front_end(host, args.headless, args.drain_deadline, args.keys, args.sigterm_exit_code)
    from hermes_console.runtime.listener import start_listener

    listener = start_listener(host, args.listen, args.listen_token_file, lambda text: print(text, file=sys.stderr))
    try:
        return _front_end(host, args.headless, args.drain_deadline, args.keys, args.sigterm_exit_code)
    finally:
        listener.stop()


def _demo(args: argparse.Namespace, extra: list[str]) -> int:
    from hermes_console.runtime.flags import check_flag_values
    from hermes_console.runtime.host import RuntimeHost

    port = _free_loopback_port()
    base_url = f"http://127.0.0.1:{port}"
    holder: dict[str, Any] = {}

    def start_sim() -> None:
        # Runs on the host thread after the UI is up: importing the simulator (aiohttp,
        # tokenizer) and loading its tokenizer (~1 s) never delay the first frame.
        from hermes_console.sim.config import LatencyConfig, SimConfig
        from hermes_console.sim.server import SimServer

        latency = LatencyConfig(mode="lognormal", mean_ms=args.latency_ms, sigma=0.5)
        sim = SimServer(SimConfig(port=port, latency=latency, faults={} if args.no_faults else dict(DEMO_FAULTS)))
        holder["sim"] = sim
        sim.start()

    check_flag_values(extra)
    _check_record_path(args.record)
    _rotate_demo_runs(args.runs_dir, args.keep_runs)

    def demo_spec() -> RunSpec:
        # Built when the runtime starts (after the first frame): every value is ours or was
        # checked above, and pydantic's import (~0.2 s) stays off the way to the first frame.
        from hermes_console.runtime.config import RunSpec

        return RunSpec(
            env=DEMO_ENV,
            mode="process",
            flags=["--openai.base_url", f"{base_url}/v1", "--env.total_steps", str(args.total_steps), *extra],
            runs_dir=args.runs_dir,
            record_path=args.record,
            server_wait_s=10.0,
        )

    try:
        host = RuntimeHost(demo_spec, exit_when_finished=args.headless, prepare=start_sim)
        print(f"hermes-console demo: simulator at {base_url} (both phases point at it)", file=sys.stderr)
        return _front_end(host, args.headless, args.drain_deadline, args.keys, args.sigterm_exit_code)
    finally:
        sim = holder.get("sim")
        if sim is not None:
            sim.stop()


def _rotate_demo_runs(runs_dir: str, keep: int) -> None:
    """Room for this run: keep keep-1 older demo runs, so at most ``keep`` are on disk."""
    from hermes_console.runtime.run_rotation import rotate

    if keep <= 0:
        return
    removed = rotate(runs_dir, DEMO_RUN_PREFIX, keep - 1)
    if removed:
        print(
            f"hermes-console demo: removed {len(removed)} old demo run dir(s) under {runs_dir} (--keep-runs {keep})",
            file=sys.stderr,
        )


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _replay(args: argparse.Namespace) -> int:
    from hermes_console.runtime.replay import ReplaySource

    source = ReplaySource(args.log, speed=args.speed)
    for warning in source.warnings:
        print(f"hermes-console: warning: {warning}", file=sys.stderr)
    return _front_end(source, args.headless, 0.0, args.keys)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "sim":
        from hermes_console.sim.cli import main as sim_main

        return int(sim_main(argv[1:]) or 0)
    if argv and argv[0] == "check-data":
        from hermes_console.check_data import main as check_data_main

        return int(check_data_main(argv[1:]))
    if argv and argv[0] == "images":
        from hermes_console.images import main as images_main

        return int(images_main(argv[1:]))
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    try:
        if args.command == "run":
            return _run(args, extra)
        if extra and args.command == "replay":
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command == "demo":
            return _demo(args, extra)
        if args.command == "replay":
            return _replay(args)
        if args.command == "attach":
            if extra:
                parser.error(f"unrecognized arguments: {' '.join(extra)}")
            from hermes_console.remote.fleet import attach_main

            return attach_main(args.addresses, args.token_file, args.keys)
    except UsageError as exc:
        print(f"hermes-console: {exc}", file=sys.stderr)
        return 2
    except (ConfigError, ValueError) as exc:
        from environments.redact import redact

        print(f"hermes-console: {redact(str(exc))}", file=sys.stderr)
        return 1
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
