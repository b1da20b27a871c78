"""The vocabulary every draft family is written in.

A family says how to recognise a draft from its config, which config fields
give its dimensions, and which tensors it has, with their shapes as
expressions over those dimensions. The rules in `dspark.schema.rules` read
families and have no per-family branches.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import field
from typing import Any, Callable, Mapping

from dspark.schema.findings import Finding
from dspark.schema.naming import strip_wrappers
from dspark.schema.records import record


@record
class TensorRule:
    """One served tensor, or one per layer (`{n}`) or per tap (`{i}`).

    `shape` entries are arithmetic over the family's dimension names.
    `role` lets payload rules find norms; `when` names a resolved boolean
    feature (e.g. "fc_norm") that must be on for the tensor to exist.
    """

    name: str
    shape: tuple[str, ...]
    role: str = "matrix"  # "matrix" | "norm" | "fc_norm" | "context_proj" | "context_norm" | "lm_head" | "token_map" | "dynamic_delta"
    when: str | None = None
    # The engine loads it when shipped and does without it otherwise (a
    # shared embedding): never reported missing.
    optional: bool = False
    # For integer tensors (`d2t`): every value[i] + i must lie in
    # [0, this expression) (checked on the payload, `--deep`).
    values_below: str | None = None
    # The first `{n}` it exists for (1: every layer after the first, which
    # an EAGLE-3 family names `midlayer`).
    start: int = 0
    # The loader views the tensor flat before copying it (P-EAGLE's
    # `mask_hidden`): any shape with the same number of elements loads.
    flat: bool = False

    @property
    def scope(self) -> str:
        if "{n}" in self.name:
            return "layer"
        if "{i}" in self.name:
            return "tap"
        return "model"


@record
class ExpectedTensor:
    """A tensor a draft of the family must ship: name, shape, role and the rule it follows."""

    name: str
    shape: tuple[int, ...]
    role: str
    rule: TensorRule
    values_below: int | None = None


@record
class DraftFamily:
    """A draft family: how its config is recognised and read, and the tensors it ships."""

    name: str
    description: str
    model_types: tuple[str, ...]
    architectures: tuple[str, ...]
    schema_file: str
    # dimension symbol -> config field, or a callable over the config
    dims: Mapping[str, str | Callable[[Mapping[str, Any]], Any]]
    tensors: tuple[TensorRule, ...]
    # Names the trainer wrote that the engine does not register (a rename
    # convert fixes): the family is recognised, the engine refuses them.
    legacy_architectures: tuple[str, ...] = ()
    # served-name prefixes the loader skips (kept out of the inventory check)
    skipped_prefixes: tuple[str, ...] = ("embed_tokens.", "lm_head.", "confidence_head.")
    # training-only names that convert leaves behind
    training_only_prefixes: tuple[str, ...] = ("t2d", "d2t")
    # training-module name prefix -> served name prefix
    renames: Mapping[str, str] = field(default_factory=dict)
    # (part, name): a stored name holding `part` anywhere is `name` to the
    # loader (EAGLE-3's `"d2t" in name` tests), whatever else it holds.
    names_by_part: tuple[tuple[str, str], ...] = ()
    # Text the loader removes wherever it sits in a name (MLA's `language_model.`).
    removed_infixes: tuple[str, ...] = ()
    # Where the tap ids sit: config -> (ids or None, the field they came from).
    tap_ids: Callable[[Mapping[str, Any]], tuple[Any, str | None]] = field(default=lambda c: (None, None))
    # How many layers the target captures by its own defaults when the config
    # names none it reads (EAGLE-3); None where a list is required.
    default_tap_count: int | None = None
    # The config field that must equal the number of taps, when the engine checks one.
    tap_count_field: str | None = None
    # Where a converter writes tap ids it learned elsewhere (the list a run
    # trained on): this field at the top level, and in the nested section
    # when the config has that section.
    tap_ids_field: str = "target_layer_ids"
    tap_ids_section: str | None = "dflash_config"
    # The draft field the target's hidden size must equal: the width of each tap.
    target_width_field: str = "target_hidden_size"
    # The field the engine falls back to when `target_width_field` is absent.
    target_width_fallback: str | None = None
    # Boolean config flags that add tensors (`fc_norm`, `norm_before_fc`):
    # judged declared against shipped.
    declared_features: tuple[str, ...] = ("fc_norm",)
    # Features that follow from the config rather than a flag of their own
    # (a Markov head for a DSpark architecture, biases for attention_bias).
    derived_features: Callable[[Mapping[str, Any], str | None], dict[str, bool]] = field(
        default=lambda config, architecture: {}
    )
    # Whether the draft has a mask token (block drafts) the engine requires.
    needs_mask_token: bool = True
    # Config rules of this family alone: (config, config_file) -> findings.
    config_rules: tuple[Callable[[Mapping[str, Any], str], list], ...] = ()

    def served_name(self, stored_name: str) -> str:
        name = strip_wrappers(stored_name)
        for part, whole in self.names_by_part:
            if part in name:
                return whole
        for infix in self.removed_infixes:
            name = name.replace(infix, "")
        for source, target in self.renames.items():
            if name.startswith(source):
                return target + name[len(source):]
        return name

    def is_skipped(self, served_name: str) -> bool:
        return served_name.startswith(self.skipped_prefixes)

    def is_training_only(self, served_name: str) -> bool:
        return any(served_name == p or served_name.startswith(p + ".") for p in self.training_only_prefixes)

    def name_for_role(self, role: str) -> str:
        """The served name of the one tensor with `role` (`context_proj`,
        `context_norm`): what `smoke` reads, whatever the family calls it."""
        (rule,) = [rule for rule in self.tensors if rule.role == role]
        return rule.name

    def fc_norm_index(self, served_name: str) -> int | None:
        """The tap index of an `fc_norm.{i}.weight` name, else None."""
        index = served_name.removeprefix("fc_norm.").removesuffix(".weight")
        if len(index) + len("fc_norm..weight") != len(served_name):
            return None
        # A canonical tap index only: the loader formats `fc_norm.{i}`, so
        # `fc_norm.01.weight` has no destination.
        canonical = index.isascii() and index.isdigit() and (index == "0" or not index.startswith("0"))
        return int(index) if canonical else None

    def resolve_dims(self, config: Mapping[str, Any],
                     overrides: Mapping[str, str | Callable[[Mapping[str, Any]], Any]] | None = None) -> dict[str, int]:
        """Dimension values from a config; a dimension whose source is
        missing, not an integer or past its bound is left out (schema
        findings cover it). `overrides`: the dimensions an engine builds
        otherwise (`FamilyLoader.dims`)."""
        dims: dict[str, int] = {}
        for symbol, source in {**self.dims, **(overrides or {})}.items():
            value = source(config) if callable(source) else config.get(source)
            if isinstance(value, int) and not isinstance(value, bool):
                dims[symbol] = value
        return dims_within_bounds(dims)

    def feature_names(self) -> set[str]:
        return {rule.when for rule in self.tensors if rule.when is not None}

    def expected_tensors(
        self, dims: Mapping[str, int], features: Mapping[str, bool] | None = None
    ) -> tuple[dict[str, ExpectedTensor], list[str]]:
        """Served name -> expected tensor, plus the names of rules that could
        not be expanded because a dimension they need is unknown. With
        `features` None every feature's tensors are listed (to recognise
        names); otherwise only those of the features that are on."""
        dims = dims_within_bounds(dims)
        expected: dict[str, ExpectedTensor] = {}
        unresolved: list[str] = []
        for rule in self.tensors:
            if rule.when is not None and features is not None and not features.get(rule.when, False):
                continue
            try:
                shape = tuple(evaluate_dim(expr, dims) for expr in rule.shape)
                below = evaluate_dim(rule.values_below, dims) if rule.values_below else None
                count = {"layer": dims.get("N"), "tap": dims.get("S"), "model": 1}[rule.scope]
                if count is None:
                    raise KeyError(rule.scope)
            except KeyError:
                unresolved.append(rule.name)
                continue
            for index in range(rule.start, count):
                name = rule.name.replace("{n}", str(index)).replace("{i}", str(index))
                expected[name] = ExpectedTensor(name, shape, rule.role, rule, below)
        return expected, unresolved


# What a real model can have (the config schemas' maxima, which say why):
# past these a count or width is a typo or an attack, and expanding the rules
# over it (10**12 layers -> 10**12 names) would never finish. The schema
# reports the field (CFG003); the rules that need it are left unexpanded.
MAX_LAYERS = 1024
MAX_TAPS = 64
MAX_DIMENSION = 1 << 24  # the largest bound of any width, rank or vocabulary


def dims_within_bounds(dims: Mapping[str, int]) -> dict[str, int]:
    """`dims` without the values past their bound (`N` layers, `S` taps,
    anything else a width): callers treat them like a missing dimension."""
    limits = {"N": MAX_LAYERS, "S": MAX_TAPS}
    return {symbol: value for symbol, value in dims.items() if value <= limits.get(symbol, MAX_DIMENSION)}


_DIM_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def evaluate_dim(expression: str, dims: Mapping[str, int]) -> int:
    """Evaluate `nh*(qk_nope+qk_rope)` over `dims`. Only names, integers,
    + - * and parentheses are allowed; an unknown name raises KeyError."""

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Name):
            return dims[node.id]
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _DIM_OPERATORS:
            return _DIM_OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        raise ValueError(f"unsupported dimension expression {expression!r}")

    return walk(ast.parse(expression, mode="eval"))


def is_int(value: Any) -> bool:
    """A JSON integer: `True` is not a layer count."""
    return isinstance(value, int) and not isinstance(value, bool)


def head_dim_or_split(config: Mapping[str, Any]) -> Any:
    """`getattr(config, "head_dim", hidden_size // num_attention_heads)`, the
    engine's reading for its GQA and Llama attention
    (models/dflash.py@f4d8ec6e:78-80; models/llama.py@f4d8ec6e:148-150)."""
    if "head_dim" in config:
        return config["head_dim"]
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if is_int(hidden) and is_int(heads) and heads > 0:
        return hidden // heads
    return None


def nested_field(config: Mapping[str, Any], name: str) -> tuple[Any, str | None]:
    """A field that may sit in `dflash_config` or at the top level. Returns
    the value and the path it came from. The engine's drafter reads
    `dflash_config.get(name) or config.name`, so a nested value wins only
    when it is truthy: null, "" or [] fall through to the top level
    (tokenspeed execution/drafter/dflash.py@4b9766f6:52-58, 146-162)."""
    nested = config.get("dflash_config")
    # ...except the mask token, which it takes whenever it is not None, 0
    # included (execution/drafter/dflash.py@4b9766f6:155-157).
    if isinstance(nested, Mapping):
        value = nested.get(name)
        wins = value is not None if name == "mask_token_id" else bool(value)
    else:
        wins = False
    if wins:
        return nested[name], f"dflash_config.{name}"
    if name in config:
        return config[name], name
    return None, None


def tap_count(config: Mapping[str, Any]) -> Any:
    if "num_target_layers" in config:
        return config["num_target_layers"]
    layer_ids, _ = nested_field(config, "target_layer_ids")
    return len(layer_ids) if isinstance(layer_ids, list) else None


SHARED_DIMS = {
    "h": "hidden_size",
    "inter": "intermediate_size",
    "N": "num_hidden_layers",
    "nh": "num_attention_heads",
    "nkv": "num_key_value_heads",
    "vocab": "vocab_size",
    "S": tap_count,
    "th": lambda c: c.get("target_hidden_size", c.get("hidden_size")),
}

DECODER_MLP_AND_NORMS = (
    TensorRule("layers.{n}.input_layernorm.weight", ("h",), role="norm"),
    TensorRule("layers.{n}.post_attention_layernorm.weight", ("h",), role="norm"),
    TensorRule("layers.{n}.mlp.gate_proj.weight", ("inter", "h")),
    TensorRule("layers.{n}.mlp.up_proj.weight", ("inter", "h")),
    TensorRule("layers.{n}.mlp.down_proj.weight", ("h", "inter")),
)


def _drafter_block_size(config: Mapping[str, Any]) -> Any:
    """block_size as the drafter looks it up: dflash_config's unless it is
    absent or null, then the top level's (execution/drafter/dflash.py@
    f4d8ec6e:81-86, the same at 4b9766f6)."""
    nested = config.get("dflash_config") if isinstance(config.get("dflash_config"), Mapping) else {}
    size = nested.get("block_size")
    return config.get("block_size") if size is None else size


def _launch_note(size: int, config_file: str) -> Finding:
    """ENG004: the drafter accepts block_size only when it equals
    --speculative-num-draft-tokens (the verify width, at least 2) or one
    less (execution/drafter/dflash.py@f4d8ec6e:74-97)."""
    launches = [n for n in (size, size + 1) if n >= 2]
    which = (f"{size} if the block counts the anchor (TorchSpec's DFlash does: its loss skips position 0 of each "
             f"block, torchspec/models/dflash.py@6f21829:293-309), {size + 1} if it counts only the drafted "
             "tokens; the other value loads too, and drafts one position fewer, or one the draft never learned."
             if len(launches) == 2 else "The verify width is at least 2 (one anchor and a drafted token).")
    return Finding(
        "ENG004",
        f"{config_file}: block_size = {size}: launch the engine with --speculative-num-draft-tokens "
        f"{' or '.join(map(str, launches))}; any other value is refused at startup. {which}",
        file=config_file,
        detail={"block_size": size, "num_draft_tokens": launches},
    )


def block_size_launch_note(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """ENG004 for a block_size the family's schema has checked (an integer
    of at least 1): the launch it needs."""
    size = _drafter_block_size(config)
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        return []
    return [_launch_note(size, config_file)]


def block_size_the_drafter_reads(config: Mapping[str, Any], config_file: str) -> list[Finding]:
    """For a family whose config class leaves block_size alone (K3): the
    drafter `int()`s it (execution/drafter/dflash.py@4b9766f6:86-97), so
    text or a float it reads is fine; one it cannot read, or below 1 (no
    launch's verify width, at least 2, is it or one more: 74-78), refuses
    the draft at startup (CFG003). Otherwise ENG004, the launch it needs."""
    raw = _drafter_block_size(config)
    if raw is None:
        return []
    try:
        size = int(raw)
    except (TypeError, ValueError, OverflowError):
        return [Finding(
            "CFG003",
            f"{config_file}: block_size = {raw!r}, which the drafter's int() cannot read: the engine refuses the "
            "draft at startup. Write the block size the draft was trained with as an integer.",
            file=config_file, detail={"field": "block_size", "value": raw},
        )]
    if size < 1:
        return [Finding(
            "CFG003",
            f"{config_file}: block_size = {raw!r}: the drafter needs --speculative-num-draft-tokens of at least 2 "
            "and a block_size equal to it or one less, so no launch serves a block_size below 1. Write the block "
            "size the draft was trained with.",
            file=config_file, detail={"field": "block_size", "value": raw},
        )]
    return [_launch_note(size, config_file)]
