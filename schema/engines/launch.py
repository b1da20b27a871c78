"""Launch settings as an input: the server flags a draft is deployed with,
in the engine's own spelling (`--launch "--speculative-num-steps 7"`).

Some verdicts depend on the launch: TokenSpeed 0.1.1 stops when
`--speculative-num-steps` disagrees with the checkpoint's block size and
loads `embed_tokens` on the last pipeline stage. This module parses a
launch string once, the same way for every engine; each engine's package
says which flags it reads (`FlagSpec`) and what they change
(`LaunchModel.judge`). A flag no rule reads is kept and named as ignored,
so a user sees what was and was not judged. Pure: opens no file.
"""

from __future__ import annotations

import json
from dataclasses import field
from typing import Any, Callable, Mapping, Sequence

from dspark.schema.errors import UsageError
from dspark.schema.findings import Finding
from dspark.schema.records import record

INT = "int"
JSON_OBJECT = "json_object"
TEXT = "text"


class LaunchError(UsageError):
    """A `--launch` string (or the settings file's `launch`) that cannot be
    read as server flags: exit 2, naming the flag and what to write."""


@record
class FlagSpec:
    """A server flag dspark reads on one engine: its name as the engine
    spells it, other spellings the engine's parser takes, the kind of value,
    and what it changes in a verdict (for the ignored/read note)."""

    name: str
    kind: str
    changes: str
    aliases: tuple[str, ...] = ()
    minimum: int | None = None
    # For TEXT flags: the values the engine accepts, upper-cased (None: any).
    choices: tuple[str, ...] | None = None


@record
class Launch:
    """A parsed launch: `values` by each read flag's canonical name (as
    given, later flags win as in argparse), `ignored` the flags no rule of
    this engine reads, in the order given."""

    engine: str
    text: str
    values: Mapping[str, Any] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()

    def get(self, flag: str, default: Any = None) -> Any:
        return self.values.get(flag, default)

    def has(self, flag: str) -> bool:
        return flag in self.values


def _malformed(text: str, engine: str, problem: str) -> LaunchError:
    return LaunchError(
        f"--launch {text!r}: {problem}",
        hint=f"Write the flags as you pass them to the {engine} server, quoted as one argument, e.g. "
             f"--launch \"--speculative-num-steps 7 --pipeline-parallel-size 2\"; `dspark families` lists the "
             "flags each engine's verdicts read.",
    )


def _value(spec: FlagSpec, raw: str, text: str, engine: str) -> Any:
    if spec.kind == INT:
        try:
            value = int(raw)
        except ValueError:
            raise _malformed(text, engine, f"{spec.name} takes an integer, not {raw!r}.") from None
        if spec.minimum is not None and value < spec.minimum:
            raise _malformed(text, engine, f"{spec.name} {value}: the server takes {spec.minimum} or more.")
        return value
    if spec.kind == JSON_OBJECT:
        try:
            value = json.loads(raw)
        except ValueError as error:
            raise _malformed(text, engine, f"{spec.name} takes a JSON object, and {raw!r} is not JSON ({error}). "
                             "Quote the JSON inside the launch string in single quotes.") from None
        if not isinstance(value, dict):
            raise _malformed(text, engine, f"{spec.name} takes a JSON object, not {raw!r}.")
        return value
    if spec.choices is not None and raw.upper() not in spec.choices:
        raise _malformed(text, engine, f"{spec.name} {raw!r} is not one of {', '.join(spec.choices)}.")
    return raw


def parse_launch(text: str, *, engine: str, flags: Sequence[FlagSpec]) -> Launch:
    """Read `text` as `--flag value` / `--flag=value` pairs. The flags in
    `flags` are validated (LaunchError on a bad value); any other flag is
    kept as ignored, with the word after it taken as its value when that
    word is not itself a flag (a server takes no positional arguments)."""
    import shlex  # only when a launch is given: a check without one never pays for it

    try:
        words = shlex.split(text)
    except ValueError as error:
        raise _malformed(text, engine, f"cannot split it into words ({error}).") from None
    by_name = {name: spec for spec in flags for name in (spec.name, *spec.aliases)}
    values: dict[str, Any] = {}
    ignored: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        if not word.startswith("-") or word in ("-", "--"):
            raise _malformed(text, engine, f"{word!r} follows no flag: give each value after its flag "
                             "(--speculative-num-steps 7).")
        name, has_equals, inline = word.partition("=")
        spec = by_name.get(name)
        following = words[index + 1] if index + 1 < len(words) else None
        takes_next = not has_equals and following is not None and not following.startswith("--")
        if spec is None:
            ignored.append(name)
            index += 2 if takes_next else 1
            continue
        if has_equals:
            raw = inline
        elif takes_next:
            raw = following
        else:
            raise _malformed(text, engine, f"{name} needs a value.")
        values[spec.name] = _value(spec, raw, text, engine)
        index += 1 if has_equals else 2
    return Launch(engine=engine, text=text, values=values, ignored=tuple(dict.fromkeys(ignored)))


@record
class LaunchModel:
    """What one engine release reads of a launch: the flags, and the rule
    that judges a draft under a launch (None: the engine's defaults)."""

    flags: tuple[FlagSpec, ...]
    # (launch or None, context) -> (new findings, replace): `replace` maps a
    # finding of the launch-free judgement to what it is under this launch
    # (None keeps it).
    judge: Callable[[Launch | None, "LaunchContext"], tuple[list[Finding], Callable[[Finding], Finding]]]
    # What dspark reads this release's flags for, in words (families, docs).
    summary: str = ""

    def parse(self, text: str, engine: str) -> Launch:
        return parse_launch(text, engine=engine, flags=self.flags)


@record(frozen=False)
class LaunchContext:
    """What a launch rule sees of a draft: its family, config as the engine
    reads it, tensors (served names), loader and target."""

    family: str
    config: Mapping[str, Any]
    config_file: str
    entries: Sequence[Any]
    loader: Any
    profile: Any
    target: Any = None


def ignored_note(launch: Launch, flags: Sequence[FlagSpec]) -> Finding:
    """LCH004: which flags were read and which change no verdict dspark
    models on this engine."""
    read = [f"{spec.name} {json.dumps(launch.values[spec.name]) if spec.kind == JSON_OBJECT else launch.values[spec.name]}"
            for spec in flags if spec.name in launch.values]
    parts = [f"read: {', '.join(read)}" if read else "no flag dspark reads on this engine"]
    if launch.ignored:
        parts.append(f"ignored (no verdict dspark models depends on them): {', '.join(launch.ignored)}")
    return Finding(
        "LCH004",
        f"--launch on {launch.engine}: {'; '.join(parts)}. The flags whose verdicts are modelled: "
        f"{', '.join(spec.name for spec in flags) or 'none'}.",
        detail={"launch": launch.text, "read": {k: v for k, v in launch.values.items()},
                "ignored": list(launch.ignored)},
    )


def keep(finding: Finding) -> Finding:
    return finding


def launch_for(profile: Any, text: str | None) -> Launch | None:
    """`text` parsed for `profile`'s release (None: no --launch). A release
    whose launch dspark does not model still refuses a malformed string,
    and names every flag as ignored."""
    if text is None:
        return None
    model = getattr(profile, "launch_model", None)
    return parse_launch(text, engine=profile.spec, flags=model.flags if model is not None else ())


def differing(launch_findings: list[Finding], others: list[Finding]) -> list[Finding]:
    """A warning that another launch fails the draft (`only_fails_there`)
    says nothing when the draft already fails at the launch judged: the
    verdict does not differ."""
    from dspark.schema.findings import Severity

    if not any(f.severity is Severity.ERROR for f in others):
        return launch_findings
    return [f for f in launch_findings if not (f.detail or {}).get("only_fails_there")]


def judge_launch(profile: Any, launch: Launch | None, context: LaunchContext
                 ) -> tuple[list[Finding], Callable[[Finding], Finding]]:
    """The launch's findings on a draft, and how it changes the others."""
    model = getattr(profile, "launch_model", None)
    if model is not None:
        return model.judge(launch, context)
    if launch is None:
        return [], keep
    return [Finding("LCH004", f"--launch on {profile.spec}: dspark models no launch flag of this release; every "
                    f"flag given is ignored ({', '.join(launch.ignored) or 'none'}) and the draft is judged at "
                    "the engine's defaults.", detail={"launch": launch.text, "read": {},
                                                      "ignored": list(launch.ignored)})], keep
