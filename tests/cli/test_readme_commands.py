"""Every `dspark <command> --flag` the README and docs/*.md show is a flag
that command takes: the docs and the CLI stay in step. The flags are read
off the typer application itself (`typer.main.get_command`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from dspark.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
# what separates commands on one shell line (a table cell's `\|` is no pipe)
SEPARATOR = re.compile(r"&&|\|\||(?<!\\)\|(?=\s)|;")
LAUNCH_VALUE = re.compile(r"""--launch[ =]("(?:[^"\\]|\\.)*"|'[^']*')""")
FLAG = re.compile(r"(?<![\w\-./:])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])")


def _command_texts(text: str) -> list[str]:
    """Shell lines of fenced blocks (continuations joined) and inline code spans."""
    texts = []
    for block in FENCE.findall(text):
        texts += block.replace("\\\n", " ").splitlines()
    prose = FENCE.sub("", text)
    texts += INLINE.findall(prose)
    return texts


def shown_commands() -> list[tuple[str, str, list[str]]]:
    """(document, command, flags) for every dspark command line shown."""
    group = typer.main.get_command(app)
    commands = set(group.commands)
    found = []
    for document in DOCUMENTS:
        for text in _command_texts(document.read_text(encoding="utf-8")):
            text = text.split(" #", 1)[0]  # a shell comment
            for part in SEPARATOR.split(text):
                words = part.split()
                if not words:
                    continue
                if Path(words[0]).name == "dspark" and len(words) > 1:
                    command = words[1] if words[1] in commands else ""
                    if not command and not words[1].startswith("-"):
                        continue  # "dspark gates, …": prose, not a command
                    rest = " ".join(words[2:] if command else words[1:])
                elif words[0] in commands and len(words) > 1 and words[1].startswith("-"):
                    command, rest = words[0], " ".join(words[1:])  # `check --deep`
                else:
                    continue
                # the value of --launch is the serving engine's flags, not dspark's
                rest = LAUNCH_VALUE.sub("--launch", rest)
                found.append((document.name, command, FLAG.findall(rest)))
    return found


def accepted_flags(command: str) -> set[str]:
    group = typer.main.get_command(app)
    target = group.commands[command] if command else group
    flags = {"--help"}
    for parameter in target.params:
        flags.update(getattr(parameter, "opts", ()))
        flags.update(getattr(parameter, "secondary_opts", ()))
    return flags


def test_the_docs_show_dspark_commands():
    shown = shown_commands()
    commands = {command for _, command, _ in shown}
    assert {"check", "inspect", "convert", "smoke", "gate", "families", "doctor"} <= commands
    assert any("--verify" in flags for _, command, flags in shown if command == "gate")


@pytest.mark.parametrize("document,command,flags", [
    pytest.param(*row, id=f"{row[0]}:{row[1] or 'dspark'}:{i}") for i, row in enumerate(shown_commands()) if row[2]
])
def test_every_flag_the_docs_show_is_accepted(document, command, flags):
    unknown = [flag for flag in flags if flag not in accepted_flags(command)]
    assert not unknown, f"{document} shows `dspark {command}` with {unknown}, which it does not take"


def test_a_flag_a_command_does_not_take_is_caught():
    assert "--verify" not in accepted_flags("inspect")
    assert "--strict" in accepted_flags("gate") and "--version" in accepted_flags("")
