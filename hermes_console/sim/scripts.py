"""Task scripts: how the scripted policy plays each terminal task.

A :class:`TaskScript` is data (what to inspect, how to solve, how a failing
episode goes wrong, how to verify); :func:`build_steps` turns it into a list of
step functions the policy replays turn by turn. Scripts are found by
``task_id`` or by a regex over the first user message (see ``TASK_SCRIPTS``
for the ``environments/terminal_tasks`` items, then ``FAMILIES`` for similar
prompts); anything else gets :func:`generic_steps`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from hermes_console.sim.actions import Action, StepContext, first_number

Step = Callable[[StepContext], Action | None]


# --------------------------------------------------------------------------- solve kinds


@dataclass(frozen=True)
class Shell:
    """Run commands (one tool call each, in one turn). ``wrong`` None = a failing episode stops early."""

    commands: tuple[str, ...]
    wrong: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Write:
    path: str
    content: str
    wrong: str | None = None


@dataclass(frozen=True)
class Patch:
    path: str
    old: str
    new: str
    fallback_cmd: str  # used when the ``patch`` tool is not offered
    wrong_new: str | None = None


@dataclass(frozen=True)
class Compute:
    """Run ``command``, read its output, then write it to ``dst`` (reacts to the tool result)."""

    command: str
    dst: str
    kind: str = "number"  # "number": first number in the output; "text": the output as is


Solve = Shell | Write | Patch | Compute


@dataclass(frozen=True)
class TaskScript:
    task_id: str
    pattern: str  # regex searched (case-insensitive) in the first user message
    solve: Solve
    look: str = "ls -la"
    read: str | None = None
    verify: str | None = None
    summary: str = "The task is done."


def _q(s: str) -> str:
    return s.replace("'", "'\\''")


# --------------------------------------------------------------------------- the table

TASK_SCRIPTS: tuple[TaskScript, ...] = (
    TaskScript(
        "greeting",
        r"greeting\.txt.*hello world",
        Write("greeting.txt", "hello world\n", "hello, world\n"),
        verify="cat greeting.txt",
        summary="greeting.txt contains hello world.",
    ),
    TaskScript(
        "count_errors",
        r"log\.txt.*ERROR.*error_count\.txt",
        Compute("grep -c ERROR log.txt", "error_count.txt"),
        read="log.txt",
        verify="cat error_count.txt",
        summary="I counted the ERROR lines and wrote the count to error_count.txt.",
    ),
    TaskScript(
        "sort_unique",
        r"names\.txt.*unique_names\.txt",
        Compute("sort -u names.txt", "unique_names.txt", "text"),
        read="names.txt",
        verify="cat unique_names.txt",
        summary="unique_names.txt holds the sorted distinct names.",
    ),
    TaskScript(
        "fix_shell_script",
        r"broken\.sh",
        Shell(("echo fi >> broken.sh",), ("echo done >> broken.sh",)),
        read="broken.sh",
        verify="bash broken.sh",
        summary="broken.sh was missing its closing fi; it now prints ok.",
    ),
    TaskScript(
        "fix_python_script",
        r"calc\.py",
        Patch("calc.py", "a - b", "a + b", "sed -i 's/a - b/a + b/' calc.py", "b - a"),
        read="calc.py",
        verify="python3 calc.py 2 3",
        summary="calc.py subtracted instead of adding; fixed.",
    ),
    TaskScript(
        "json_edit",
        r"config\.json.*version",
        Shell(
            (
                "python3 -c \"import json; d = json.load(open('config.json')); d['version'] = 2; "
                "json.dump(d, open('config.json', 'w'))\"",
            ),
            ('sed -i \'s/"version": 1/"version": 3/\' config.json',),
        ),
        read="config.json",
        verify="cat config.json",
        summary="config.json now has version 2.",
    ),
    TaskScript(
        "find_py_files",
        r"\.py.*below the directory src|py_files\.txt",
        Compute("find src -name '*.py' | sort", "py_files.txt", "text"),
        look="find src | head -n 50",
        verify="cat py_files.txt",
        summary="py_files.txt lists the .py files under src.",
    ),
    TaskScript(
        "csv_sum",
        r"sales\.csv.*total\.txt",
        Compute("awk -F, 'NR>1 {s+=$2} END {print s}' sales.csv", "total.txt"),
        read="sales.csv",
        verify="cat total.txt",
        summary="total.txt holds the sum of the amount column.",
    ),
    TaskScript(
        "rename_files",
        r"photos.*\.jpeg",
        Shell(
            ('(cd photos && for f in *.jpeg; do mv "$f" "${f%.jpeg}.jpg"; done)',),
            ("mv photos/cat.jpeg photos/cat.jpg",),
        ),
        look="ls -la photos",
        verify="ls photos",
        summary="Every .jpeg in photos is now .jpg.",
    ),
    TaskScript(
        "write_even_script",
        r"is_even\.sh",
        Write(
            "is_even.sh",
            "#!/bin/bash\nif [ $(( $1 % 2 )) -eq 0 ]; then exit 0; else exit 1; fi\n",
            "#!/bin/bash\nif [ $(( $1 % 2 )) -eq 0 ]; then exit 1; else exit 0; fi\n",
        ),
        verify="bash is_even.sh 4; echo $?; bash is_even.sh 7; echo $?",
        summary="is_even.sh is written.",
    ),
    TaskScript(
        "word_count",
        r"words in poem\.txt|poem\.txt.*words\.txt",
        Compute("wc -w < poem.txt", "words.txt"),
        read="poem.txt",
        verify="cat words.txt",
        summary="words.txt holds the word count of poem.txt.",
    ),
    TaskScript(
        "make_project",
        r"directory project.*README",
        Shell(
            ("mkdir -p project/src project/tests && echo '# Project' > project/README.md",), ("mkdir -p project/src",)
        ),
        verify="find project | sort; head -n 1 project/README.md",
        summary="project/ is set up.",
    ),
    TaskScript(
        "replace_text",
        r"notes\.txt.*colour",
        Patch("notes.txt", "colour", "color", "sed -i 's/colour/color/g' notes.txt", "colr"),
        read="notes.txt",
        verify="cat notes.txt",
        summary="Every colour in notes.txt is now color.",
    ),
    TaskScript(
        "line_count_total",
        r"data directory.*total_lines\.txt",
        Compute("cat data/*.txt | wc -l", "total_lines.txt"),
        look="ls -la data",
        verify="cat total_lines.txt",
        summary="total_lines.txt holds the total line count.",
    ),
    TaskScript(
        "extract_column",
        r"users\.csv.*emails\.txt",
        Compute("tail -n +2 users.csv | cut -d, -f2", "emails.txt", "text"),
        read="users.csv",
        verify="cat emails.txt",
        summary="emails.txt lists the email column.",
    ),
    TaskScript(
        "largest_file",
        r"largest file.*largest\.txt",
        Compute("ls -S files | head -n 1", "largest.txt", "text"),
        look="ls -la files",
        verify="cat largest.txt",
        summary="largest.txt names the largest file.",
    ),
    TaskScript(
        "answer_42",
        r"result\.txt.*42",
        Write("result.txt", "42\n", "24\n"),
        verify="cat result.txt",
        summary="result.txt contains 42.",
    ),
    TaskScript(
        "reverse_lines",
        r"lines\.txt.*reversed\.txt",
        Compute("tac lines.txt", "reversed.txt", "text"),
        read="lines.txt",
        verify="cat reversed.txt",
        summary="reversed.txt has the lines last-first.",
    ),
    TaskScript(
        "greet_script",
        r"greet\.sh",
        Write("greet.sh", '#!/bin/bash\necho "Hello, $1!"\n', '#!/bin/bash\necho "Hello $1"\n'),
        verify="bash greet.sh Ada",
        summary="greet.sh prints the greeting.",
    ),
    TaskScript(
        "json_count",
        r"items\.json.*done_count\.txt",
        Compute(
            "python3 -c \"import json; print(sum(1 for x in json.load(open('items.json')) if x['done']))\"",
            "done_count.txt",
        ),
        read="items.json",
        verify="cat done_count.txt",
        summary="done_count.txt holds the number of done items.",
    ),
    TaskScript(
        "fix_indent",
        r"hello\.py.*IndentationError",
        Write("hello.py", 'def main():\n    print("hi")\nmain()\n', 'def main():\n    print("hi")\n'),
        read="hello.py",
        verify="python3 hello.py",
        summary="hello.py is indented correctly and prints hi.",
    ),
    TaskScript(
        "uppercase",
        r"lower\.txt.*upper\.txt",
        Compute("tr a-z A-Z < lower.txt", "upper.txt", "text"),
        read="lower.txt",
        verify="cat upper.txt",
        summary="upper.txt is the upper-cased text.",
    ),
)
_BY_ID = {s.task_id: s for s in TASK_SCRIPTS}
_COMPILED = tuple((re.compile(s.pattern, re.IGNORECASE | re.DOTALL), s) for s in TASK_SCRIPTS)


# Prompt families: unknown tasks phrased like the known ones still get a real script.
def _create_file(m: re.Match[str]) -> TaskScript:
    name, text = m.group("name"), m.group("text").strip()
    return TaskScript(
        f"create:{name}",
        "",
        Write(name, text + "\n", text + "!\n"),
        verify=f"cat {name}",
        summary=f"{name} contains {text}.",
    )


def _count_lines(m: re.Match[str]) -> TaskScript:
    word, src, dst = m.group("word"), m.group("src"), m.group("dst")
    return TaskScript(
        f"count:{src}",
        "",
        Compute(f"grep -c '{_q(word)}' {src}", dst),
        read=src,
        verify=f"cat {dst}",
        summary=f"{dst} holds the number of lines in {src} containing {word}.",
    )


def _run_command(m: re.Match[str]) -> TaskScript:
    # Fault and security tests need the policy to issue an exact command (a long sleep,
    # an output flood, `env`): the first turn always runs it, then a cheap step, then the answer.
    cmd = m.group("cmd").strip()
    return TaskScript(
        f"run:{cmd[:40]}", "", Shell(("echo done",), ("echo done",)), look=cmd, summary="I ran the command."
    )


FAMILIES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], TaskScript]], ...] = (
    (re.compile(r"^run (?:exactly )?this command:\s*(?P<cmd>.+?)\s*$", re.IGNORECASE | re.DOTALL), _run_command),
    (
        re.compile(
            r"create a file (?:named |called )?(?P<name>[\w./-]+?)[,.]?\s+(?:\S+\s+){0,4}?containing "
            r"(?:exactly |only )?(?:the (?:text|word|number|string):?\s*)?(?P<text>.+?)\.?\s*$",
            re.IGNORECASE | re.DOTALL,
        ),
        _create_file,
    ),
    (
        re.compile(
            r"count (?:the )?lines (?:that )?contain(?:ing|s)? (?:the word )?(?P<word>\S+?) in (?P<src>[\w./-]+?)"
            r",? and write (?:just )?(?:the|that) (?:number|count) to (?P<dst>[\w./-]+?)\.?\s*$",
            re.IGNORECASE | re.DOTALL,
        ),
        _count_lines,
    ),
)


def find_script(task_text: str, task_id: str | None = None) -> TaskScript | None:
    if task_id and task_id in _BY_ID:
        return _BY_ID[task_id]
    for rx, script in _COMPILED:
        if rx.search(task_text):
            return script
    for rx, factory in FAMILIES:
        m = rx.search(task_text)
        if m:
            return factory(m)
    return None


# --------------------------------------------------------------------------- steps

_STOP_EARLY = "I have completed the task."


def _wrong_text(value: str, kind: str) -> str:
    if kind == "number":
        try:
            return str(int(float(value)) + 1)
        except ValueError:
            return value + "0"
    lines = value.splitlines()
    return "\n".join(lines[1:]) if len(lines) > 1 else value[:-1] or "?"


def build_steps(script: TaskScript) -> list[Step]:
    solve = script.solve

    def inspect(ctx: StepContext) -> Action | None:
        return ctx.act(
            ctx.shell(script.look),
            ctx.read(script.read) if script.read else None,
            say="Let me look at the workspace first.",
            think=f"The task: {ctx.task_text[:120].rstrip('.')}. I should see what is there before changing anything.",
        )

    steps: list[Step] = [inspect]

    if isinstance(solve, Compute):

        def compute(ctx: StepContext) -> Action | None:
            return ctx.act(ctx.shell(solve.command), think="I'll compute the answer with a command, then save it.")

        def write_result(ctx: StepContext) -> Action | None:
            out = ctx.last_output().strip()
            value = (first_number(out) or "0") if solve.kind == "number" else out
            if not ctx.solved():
                if ctx.stops_early():
                    return ctx.answer(_STOP_EARLY)
                value = _wrong_text(value, solve.kind)
            return ctx.act(
                ctx.write(solve.dst, value + "\n"),
                say=f"The command printed {value[:60]!r}; saving it.",
                think=f"The output is {value[:60]!r}. I'll write exactly that to {solve.dst}.",
            )

        steps += [compute, write_result]
    else:

        def do_solve(ctx: StepContext) -> Action | None:
            ok = ctx.solved()
            if not ok and (ctx.stops_early() or (isinstance(solve, Shell) and solve.wrong is None)):
                return ctx.answer(_STOP_EARLY)
            if isinstance(solve, Shell):
                cmds = solve.commands if ok else (solve.wrong or ())
                return ctx.act(*(ctx.shell(c) for c in cmds), think="I know what to run now.")
            if isinstance(solve, Write):
                content = solve.content if ok else (solve.wrong or solve.content + "?")
                return ctx.act(
                    ctx.write(solve.path, content),
                    say=f"Writing {solve.path}.",
                    think=f"I'll write {solve.path} in one go.",
                )
            new = solve.new if ok else (solve.wrong_new or solve.new + "?")
            fallback = solve.fallback_cmd if ok else f"sed -i 's/{_q(solve.old)}/{_q(new)}/g' {solve.path}"
            return ctx.act(
                ctx.patch(solve.path, solve.old, new, fallback),
                think=f"Replacing {solve.old!r} with {new!r} in {solve.path}.",
            )

        steps.append(do_solve)

    def verify(ctx: StepContext) -> Action | None:
        if not script.verify:
            return None
        return ctx.act(ctx.shell(script.verify), think="Let me check the result.")

    def final(ctx: StepContext) -> Action:
        shown = ctx.last_output().strip()[:200]
        text = script.summary + (f"\n\nCheck:\n{shown}" if shown else "")
        return ctx.answer(text, think="The check looks right, so I'm done.")

    return steps + [verify, final]


_LS_FILE = re.compile(r"^-\S*\s+(?:\S+\s+){7}(?P<name>[^\s/]+)$", re.MULTILINE)


def generic_steps() -> list[Step]:
    """For prompts no script knows: look around, read a file, write notes, answer."""

    def look(ctx: StepContext) -> Action | None:
        return ctx.act(
            ctx.shell("ls -la"),
            say="Let me see what is in the workspace.",
            think="I don't know this task's files yet, so I'll list them first.",
        )

    def read_one(ctx: StepContext) -> Action | None:
        m = _LS_FILE.search(ctx.last_output())
        return ctx.act(ctx.read(m.group("name"))) if m else None

    def notes(ctx: StepContext) -> Action | None:
        if not ctx.solved() and ctx.stops_early():
            return ctx.answer(_STOP_EARLY)
        names = [m.group("name") for m in _LS_FILE.finditer(ctx.all_output())]
        body = f"Task: {ctx.task_text[:200]}\nFiles seen: {', '.join(names) or '(none)'}\n"
        return ctx.act(ctx.write("notes.txt", body), think="I'll keep notes of what I found.")

    def final(ctx: StepContext) -> Action:
        return ctx.answer(
            "I inspected the workspace and wrote my notes to notes.txt.", think="That is all I can do here."
        )

    return [look, read_one, notes, final]


def no_tools_answer(script: TaskScript | None, task_text: str) -> Action:
    """No tools offered: answer in text only."""
    if script is None:
        return Action(
            content="I can't inspect the workspace without tools, but I would start by listing the files.",
            reasoning="No tools are available, so I can only describe an approach.",
        )
    solve = script.solve
    if isinstance(solve, Shell):
        how = "\n".join(solve.commands)
    elif isinstance(solve, Compute):
        how = f"{solve.command} > {solve.dst}"
    elif isinstance(solve, Write):
        how = f"cat > {solve.path} <<'EOF'\n{solve.content}EOF"
    else:
        how = solve.fallback_cmd
    return Action(
        content=f"Without a shell I can't run it myself; this does it:\n```\n{how}\n```",
        reasoning=f"No tools are offered for: {task_text[:80]}",
    )
