"""What a serving engine's loader does with a draft, as data.

An `EngineProfile` is one engine at one revision. For each draft family it
serves it holds a `FamilyLoader`: how the loader turns a checkpoint's
tensor names into its parameter names, which names it skips, which
parameters it builds fused from several tensors (and whether it also takes
them pre-fused), what it does with a name it has no destination for and
with a destination left empty, which declared features it honours, and
which tap ids its target accepts. Every fact carries the `Source` it was
read from, so `dspark families` can print the contract with its provenance
and a reviewer can check each rule against the engine's code.

Why this module is long: it is the one vocabulary every engine profile is
written in (sources, name handling, taps, vocabulary, features); split, its
dataclasses would import one another across modules.
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import Any, Callable, Mapping, Sequence

from dspark.schema.findings import Finding
from dspark.schema.records import record


_HEX_DIGITS = frozenset("0123456789abcdef")


def _is_git_commit(text: str) -> bool:
    """9 to 40 lowercase hex digits: a commit (a version such as
    `vllm==0.33.0` is not one)."""
    return 9 <= len(text) <= 40 and _HEX_DIGITS.issuperset(text)


@record
class Source:
    """Where a rule was read: a file of the engine's repository at a commit,
    and the function (or class, or module-level name) that holds the lines.

    `qualname` (`Class.method`, dotted as Python's `__qualname__`) is what
    survives a release: line numbers move, the function keeps its name, so a
    reviewer finds the code again and `--runtime` compares the installed
    function's source with the one the rule was read from
    (converters/fingerprints.py). "" where the lines are not inside one."""

    path: str
    lines: str
    commit: str
    qualname: str = ""

    def cite(self) -> str:
        # A git commit is shortened to 8 digits; a version (`vllm==0.33.0`) is kept whole.
        commit = self.commit[:8] if _is_git_commit(self.commit) else self.commit
        where = f"{self.path}::{self.qualname}" if self.qualname else self.path
        return f"{where}@{commit}:{self.lines}"

    @property
    def function(self) -> str | None:
        """`path::qualname`, the key a fingerprint is recorded under; None
        without a qualname."""
        return f"{self.path}::{self.qualname}" if self.qualname else None


@record
class SkipRule:
    """Names the loader skips on purpose: harmless to ship, reported as
    INV005 with the bytes they cost. `pattern` is a regex searched in the
    name after the loader's rewrites."""

    pattern: str
    why: str
    source: Source
    # A config flag that, when truthy, makes the loader keep these names
    # (vLLM's K3 DSpark loads confidence_head when enable_confidence_head).
    unless: str | None = None

    def matches(self, name: str, config: Mapping[str, Any] | None = None) -> bool:
        if self.unless is not None and config is not None and config.get(self.unless):
            return False
        return re.search(self.pattern, name) is not None


@record
class FusedParameter:
    """A parameter the engine fills from several checkpoint tensors (stacked
    rows). `parts` are served-name patterns (with `{n}`), in row order;
    `fused` is the engine's own name, which it may also accept pre-stacked."""

    fused: str
    parts: tuple[str, ...]
    fused_accepted: bool
    # True when the loader marks the parameter loaded after any one part, so
    # a missing part leaves rows uninitialised without an error.
    partial_passes: bool
    source: Source
    # When `fused_accepted` is False: what the loader does with the
    # pre-stacked tensor, in words ("fails the load: ...", "drops it: ...").
    when_pre_fused: str = ""


@record
class FeatureSupport:
    """Whether the loader honours a declared feature (`fc_norm`, ...)."""

    supported: bool
    source: Source
    # What the engine does with the declaration when it does not honour it.
    when_unsupported: str = ""
    # For an unread setting the engine fixes (`hidden_act` always silu): a
    # declared value other than this one is served as this one. None: the
    # flag is unread when set true.
    fixed_value: Any = None
    # Other spellings of fixed_value that compute the same thing.
    same_as_fixed: tuple = ()


@record
class StreamResolution:
    """How the engine picks `aux_hidden_stream` and who validates it."""

    # The drafter reads `dflash_config.aux_hidden_stream` first when truthy,
    # else the top level.
    nested_truthy_wins: bool
    # Only the top-level value is validated (null and "" are refused there).
    validates_top_level: bool
    # The engine serves only this stream, whatever the checkpoint declares
    # (None: it honours the declaration).
    fixed_stream: str | None
    source: Source
    # An environment variable the drafter reads first: when set (non-empty)
    # its value, stripped and lower-cased, is the stream served, whatever the
    # checkpoint declares. None: the engine reads no variable.
    env_override: str | None = None
    # The target decides, the declaration is never read: the AttnRes mixture
    # on a Kimi-K3 target whose config sets attn_res_block_size, the prefix
    # stream on any other (SGLang's DFlash/DSpark capture).
    target_decides: bool = False


# What a tap id k means on the target, before any shift the engine applies.
LAYER_OUTPUT = "layer_output"  # the output of decoder layer k (0-based); -1 the embeddings
HIDDEN_STATES = "hidden_states"  # hidden_states[k]: the embeddings for 0, the output of layer k-1 otherwise
NUMBERINGS = (LAYER_OUTPUT, HIDDEN_STATES)

# How a tap path is picked (TapPaths.pick).
FIRST_TRUTHY = "first_truthy"  # the first non-empty value wins; null, [] fall through
FIRST_NOT_NULL = "first_not_null"  # the first value that is not null wins ([] included)
FIRST_PRESENT = "first_present"  # the first key present wins, null included


def _walk(config: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    """(present, value) of a dotted path; a section that is not an object
    holds nothing."""
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


@record
class TapPaths:
    """Where an engine reads tap ids: dotted config paths, tried in order.

    For each root (the config, then each section of `also_under` that is an
    object) the paths are tried in order and the first that `pick` accepts
    wins. With `section_shadows`, a nested path whose section is present
    (not null) ends the search in that root even when it holds no list:
    TokenSpeed's target reads only `eagle_config`'s list once `eagle_config`
    exists."""

    paths: tuple[str, ...]
    pick: str = FIRST_TRUTHY
    section_shadows: bool = False
    also_under: tuple[str, ...] = ()

    def read(self, config: Mapping[str, Any]) -> tuple[Any, str | None]:
        """The ids and the path they came from; (None, None) when none is
        picked."""
        roots: list[tuple[Mapping[str, Any], str]] = [(config, "")]
        roots += [(config[s], f"{s}.") for s in self.also_under if isinstance(config.get(s), Mapping)]
        for root, prefix in roots:
            for path in self.paths:
                section, _, _ = path.rpartition(".")
                present, value = _walk(root, path)
                shadowing = self.section_shadows and section and root.get(section.split(".")[0]) is not None
                if self._accepts(present, value):
                    return value, prefix + path
                if shadowing:
                    break
        return None, None

    def _accepts(self, present: bool, value: Any) -> bool:
        if self.pick == FIRST_PRESENT:
            return present
        if self.pick == FIRST_NOT_NULL:
            return value is not None
        return bool(value)


@record
class TapNumbering:
    """What an id the engine reads captures on the target.

    `base` is LAYER_OUTPUT or HIDDEN_STATES. `shift(ids, target_class)`
    is the offset the engine adds before it captures (SGLang's DeepSeek
    and Kimi-K2 targets add 1 only when the first id is 1); None: no
    offset. `text` says it in words for findings."""

    base: str
    text: str
    source: Source
    shift: Callable[[Sequence[int], str | None], int] | None = None

    def layer_outputs(self, ids: Sequence[int], target_class: str | None = None) -> list[int]:
        """The decoder layer whose output each id captures (0-based; -1 is
        the embeddings): the engine-neutral reading two engines compare."""
        offset = self.shift(ids, target_class) if self.shift is not None else 0
        base = 0 if self.base == LAYER_OUTPUT else -1
        return [int(i) + offset + base for i in ids]


@record
class TapReading:
    """How one engine picks a draft's taps for one family."""

    # Where the target reads the ids it captures.
    target: TapPaths
    numbering: TapNumbering
    source: Source
    # Where the draft reads the list it builds fc for (its length is the
    # tap count); None: the same list as the target.
    draft: TapPaths | None = None
    # The ids the target captures when it reads none: its layer count N ->
    # ids, in this engine's numbering; None where a list is required.
    defaults: Callable[[int], list[int]] | None = None
    defaults_text: str = ""
    # The tap count the draft builds for when it reads no list.
    default_count: int | None = None
    # Paths whose ids are numbered otherwise than `numbering` (vLLM reads
    # `eagle_aux_hidden_state_layer_ids` as hidden_states ids and
    # `target_layer_ids` as layer outputs, in one search).
    path_numbering: Mapping[str, TapNumbering] = field(default_factory=dict)
    # Config fields that give the draft's tap count outright, tried before
    # its list (vLLM's `num_aux_hidden_states`): the first not null wins.
    count_fields: tuple[str, ...] = ()
    # The config field the draft's tap count falls back to when it reads no
    # list, in place of `default_count` (vLLM DFlash: `num_hidden_layers`).
    count_fallback_field: str | None = None

    def numbering_for(self, path: str | None) -> TapNumbering:
        """The numbering of the ids read from `path` (a TapPaths.read path,
        `text_config.` prefix and all)."""
        if path is not None:
            bare = path.split(".", 1)[1] if path.startswith("text_config.") else path
            if bare in self.path_numbering:
                return self.path_numbering[bare]
        return self.numbering

    def target_ids(self, config: Mapping[str, Any]) -> tuple[Any, str | None]:
        return self.target.read(config)

    def draft_ids(self, config: Mapping[str, Any]) -> tuple[Any, str | None]:
        return (self.draft or self.target).read(config)

    def draft_count(self, config: Mapping[str, Any]) -> Any:
        """How many taps the draft builds fc for: the length of the list it
        reads, `default_count` when it reads none, None when what it reads
        is not a list (the engine's len() raises)."""
        for name in self.count_fields:
            if config.get(name) is not None:
                return config[name]
        ids, path = self.draft_ids(config)
        if ids is None and path is None:
            if self.count_fallback_field is not None:
                return config.get(self.count_fallback_field)
            return self.default_count
        return len(ids) if isinstance(ids, list) else None


# What a loader does with a token map or a shipped embedding.
HOT_TOKEN_MAP = "hot_token_map"  # read: draft token i is target token i + d2t[i]
DROPPED = "dropped"  # skipped without a word
REJECTED = "rejected"  # a name without destination: fails the load
REJECTED_WHEN_FULL_VOCAB = "rejected_when_full_vocab"  # fails the load when draft vocab == target vocab
DRAFT_IF_SHIPPED = "draft_if_shipped"  # the draft's own when shipped, else the target's
TARGET = "target"  # always replaced by the target's
# the target's, unless target_hidden_size is present and differs from
# hidden_size: then the draft's own, shipped or not
TARGET_UNLESS_WIDTHS_DIFFER = "target_unless_widths_differ"
# the draft's own (shipped or not) with its own head and a target_hidden_size apart, else the target's
TARGET_UNLESS_OWN_HEAD_AND_WIDTHS_DIFFER = "target_unless_own_head_and_widths_differ"
# In `text_config_model_types`: every config class takes a `text_config`.
ANY_MODEL_TYPE = "*"


HEAD_NOT_SHIPPED_UNLESS_DECLARED = "not_shipped_unless_has_own_lm_head"
OWN_HEAD_FLAG = "has_own_lm_head"


@record
class VocabHandling:
    """What the loader does with `d2t`, `t2d` and the draft's embedding (its
    head: `FamilyLoader.head_from_target`)."""

    d2t: str
    t2d: str
    embedding: str
    source: Source
    # The integer dtype of the buffer the loader copies d2t into ("I64":
    # vLLM's int64 parameter, `copy_` casting a float table and truncating
    # each entry toward zero, so a float table is served as trained only
    # when its entries are integers its dtype holds: rules/token_map.py reads
    # them); "" where the table is used as stored, its dtype and all
    # (TokenSpeed and SGLang add it to token ids as is).
    d2t_buffer: str = ""


@record
class FamilyLoader:
    """One engine revision's loader for one draft family."""

    family: str
    model_class: str
    # model_type values the engine's config path parses into a config class
    # this model can use.
    model_types: tuple[str, ...]
    # (regex, replacement) applied in order, each at most once, to a stored
    # tensor name: the result is the name the loader looks up.
    name_rewrites: tuple[tuple[str, str], ...]
    skips: tuple[SkipRule, ...]
    fused: tuple[FusedParameter, ...]
    # "rejects": a name without a destination fails the load;
    # "drops": the loader skips it without a word;
    # "drops_logged": it logs one line and skips it (the load goes on).
    unexpected: str
    # "rejects": a destination left empty fails the load;
    # "uninitialised": it is served with whatever memory or ones it had.
    missing: str
    features: Mapping[str, FeatureSupport]
    # Tap ids the target accepts: [low, target layers + high_offset].
    tap_low: int
    tap_high_offset: int
    stream: StreamResolution | None
    sources: Mapping[str, Source] = field(default_factory=dict)
    # model_type -> {field: default} the engine's config class fills in.
    config_defaults: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    # Of `model_types`, those the engine parses into a generic config class
    # that defaults none of the family's own fields (LlamaConfig for an MLA
    # draft): a check judges them as the engine reads them; `convert` writes
    # model_types[0], the family's own config class, in their place.
    generic_model_types: tuple[str, ...] = ()
    # The config class runs int()/str().lower() over its fields.
    coerces_values: bool = False
    lowercased_fields: tuple[str, ...] = ()
    # Fields (a dotted path into a nested section) the engine's code runs
    # int() over wherever it reads them, a list element by element.
    int_coerced_fields: tuple[str, ...] = ()
    # Top-level fields the config class runs float() over.
    float_coerced_fields: tuple[str, ...] = ()
    # Fields the config class bool()s: any value loads, "false" as True
    bool_coerced_fields: tuple[str, ...] = ()
    # What this engine's model cannot serve as the config declares it (a
    # rope type its layer drops, a width its forward skips): (config,
    # config_file) -> findings, run on the config as the engine sees it.
    config_limits: tuple[Callable[[Mapping[str, Any], str], list], ...] = ()
    # Fields the model never reads (a value there cannot be wrong).
    ignored_fields: tuple[str, ...] = ()
    # Boolean flags other trainers write that change what the draft computes
    # but that this loader never reads: true means served wrong, silently.
    unread_flags: Mapping[str, FeatureSupport] = field(default_factory=dict)
    # When the engine serves the target's head instead of the draft's
    # (families with their own `lm_head`): "draft_vocab_size_null" (absent
    # or null), "draft_vocab_size_absent" (only absent, and a shipped head
    # keeps the draft's), "not_shipped" (whenever the draft ships none:
    # vLLM), "always" (a shipped head is dropped), "draft_vocab_size_unset"
    # (absent or null, whatever the widths: SGLang),
    # HEAD_NOT_SHIPPED_UNLESS_DECLARED (vLLM 0.31.0+'s DFlash drafter: as
    # "not_shipped", but a DFlash draft whose config sets has_own_lm_head
    # keeps its own head, loaded or not); "" for no own head.
    head_from_target: str = ""
    # The target may also capture id N, its final residual: targets built on
    # the engine's BaseTransformerModel do (TargetFacts.captures_final_residual).
    tap_final_residual: bool = False
    # What the engine does with a tap id outside [tap_low, N + tap_high_offset].
    taps_outside_range: str = "refuses the rest at startup"
    # Target model classes (their `architectures` entry) this family's
    # drafter can wire itself to; None where any capturing target will do.
    # A DFlash-style drafter (K3 DSpark, GQA DFlash/DSpark) also checks its
    # taps with the target's own capture setter, whose range is the target
    # class's, not the family's.
    target_classes: frozenset[str] | None = None
    # Where one variant of the family (its draft architecture) is hosted by
    # fewer classes than `target_classes`: SGLang wires a DFLASH draft only
    # to a class with set_dflash_layers_to_capture, a DSPARK draft to one
    # with either setter. Architecture -> the classes that host it.
    variant_target_classes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    # What the engine takes from a target class at startup, in words, for a
    # class outside `target_classes` (TGT007); "" for TokenSpeed's DFlash
    # drafter's wiring.
    target_wiring: str = ""
    # Where and how tap ids are read (None: the family's own reading).
    taps: TapReading | None = None
    # d2t / t2d / embedding (None: the family has no token map).
    vocab: VocabHandling | None = None
    # Dimensions the engine builds differently from what the trainer wrote
    # (symbol -> config field or callable, over the family's `dims`): the
    # Llama EAGLE-3 fc is hidden_size per tap in TokenSpeed whatever
    # target_hidden_size says.
    dims: Mapping[str, Any] = field(default_factory=dict)
    # The draft field the engine sizes each tap from, which the target's
    # hidden_size must equal, and the one it falls back to when that is
    # absent; None: the family's (`DraftFamily.target_width_field`).
    target_width_field: str | None = None
    target_width_fallback: str | None = None
    # Target model classes whose forward returns no captured states (TGT006;
    # cite them as sources["targets without capture"]), and those that also
    # capture tap id N, the residual after the last layer (with tap_final_residual).
    targets_without_capture: frozenset[str] = frozenset()
    final_residual_targets: frozenset[str] = frozenset()
    # Names without a destination that the loader drops without a word even
    # though `unexpected` is "rejects" (vLLM ignores any unexpected `.bias`).
    unexpected_dropped: tuple[SkipRule, ...] = ()
    # Names without a destination that fail the load even though
    # `unexpected` drops the rest, each while a derived feature is on
    # (feature, rule): SGLang's DSpark Markov head.
    unexpected_rejected: tuple[tuple[str, SkipRule], ...] = ()
    # Served-name patterns whose absence the loader does not notice even
    # though `missing` is "rejects": they are served uninitialised (vLLM
    # counts every parameter of a layer with a quantization method loaded).
    missing_unchecked: tuple[str, ...] = ()
    # The trainer whose own config shape is the engine's only way to this
    # class (vLLM's P-EAGLE: its reader of speculators' config names it,
    # while a plain config naming it is renamed at launch to a class it does
    # not register); cite it as sources["native config only"]. None: any
    # config naming the class reaches it.
    native_shape_only: str | None = None
    # Served-name patterns whose absence the loader refuses even though
    # `missing` is "uninitialised" (vLLM's EAGLE-3 class raises on a
    # parallel-drafting draft without `mask_hidden`).
    missing_checked: tuple[str, ...] = ()
    # What the engine does when the config names no mask token, in words
    # ("" : it refuses the draft).
    mask_token_fallback: str = ""
    # The draft field the engine reads as the target's layer count (SGLang's
    # DFlash: num_target_layers, which other trainers write as the tap count).
    target_depth_field: str | None = None
    # Where the engine reads a declared flag: flag -> the paths it tries and
    # how it picks (SGLang: eagle_config's norm_before_fc when present;
    # fc_norm or use_aux_norm, the first true).
    flag_sources: Mapping[str, "TapPaths"] = field(default_factory=dict)
    # Where the engine compares the draft's target_num_hidden_layers and
    # vocab_size (its config class's defaults when absent) with the loaded
    # target's at startup and refuses a mismatch (TokenSpeed 0.1.1's K3
    # DSpark); None: it never compares them (TGT003/TGT004 say what follows).
    startup_target_checks: Source | None = None
    # The fields whose `dflash_config` value the engine serves over the top
    # level's (OVR001 when they differ); None: the family's own reading
    # (rules/config.py `_override_findings`). TokenSpeed 0.1.1's K3 model
    # reads its taps and stream at the top level only, its drafter the mask
    # token nested first.
    nested_overrides: tuple[str, ...] | None = None
    # Names the loader skips at the default launch but loads under another
    # it supports: regex -> that launch, in the engine's flags (TokenSpeed
    # 0.1.1's K3 model loads embed_tokens on the last pipeline stage).
    # convert keeps them, so its output serves every launch.
    launch_loaded: Mapping[str, str] = field(default_factory=dict)
    # Derived features this engine's model builds whatever the config says
    # (vLLM's DFlash2 always builds GQA attention, never MLA): they replace
    # the family's reading of the config.
    fixed_features: Mapping[str, bool] = field(default_factory=dict)

    def launch_loading(self, served_name: str) -> str | None:
        """The launch under which the loader loads a name it skips by default."""
        return next((launch for pattern, launch in self.launch_loaded.items() if re.search(pattern, served_name)),
                    None)

    def engine_name(self, stored_name: str) -> str:
        name = stored_name
        for pattern, replacement in self.name_rewrites:
            name = re.sub(pattern, replacement, name, count=1)
        return name

    def skip_rule(self, engine_name: str, config: Mapping[str, Any] | None = None) -> SkipRule | None:
        return next((rule for rule in self.skips if rule.matches(engine_name, config)), None)

    def dropped_unexpected(self, engine_name: str) -> SkipRule | None:
        return next((rule for rule in self.unexpected_dropped if rule.matches(engine_name)), None)

    def rejected_unexpected(self, engine_name: str, features: Mapping[str, bool]) -> SkipRule | None:
        return next((rule for feature, rule in self.unexpected_rejected
                     if features.get(feature, False) and rule.matches(engine_name)), None)

    def missing_action(self, served_name: str) -> str:
        """"rejects" or "uninitialised": what a never-loaded `served_name` gets."""
        if self.missing == "rejects" and any(re.search(p, served_name) for p in self.missing_unchecked):
            return "uninitialised"
        if self.missing == "uninitialised" and any(re.search(p, served_name) for p in self.missing_checked):
            return "rejects"
        return self.missing

    def supports(self, feature: str) -> bool:
        support = self.features.get(feature)
        return support is None or support.supported


@record
class ArchitectureResolution:
    """How the engine picks a model class from `architectures`: the draft
    worker may rewrite the first entry, then the first registered entry
    wins."""

    registered: frozenset[str]
    # first-entry prefix -> replacement
    first_entry_prefix_rewrites: tuple[tuple[str, str], ...]
    # first-entry exact rewrites (applied when none of `keep_substrings` is in it)
    first_entry_exact_rewrites: Mapping[str, str]
    keep_substrings: tuple[str, ...]
    appended_suffix: str
    # model_type -> architectures the config class fills in when absent
    default_architectures: Mapping[str, tuple[str, ...]]
    source: Source
    # Other names the engine registers for a family's model class (any
    # entry): registered name -> the family's architecture name.
    aliases: Mapping[str, str] = field(default_factory=dict)

    def resolve(self, architectures: object, model_type: object) -> tuple[str | None, list[str]]:
        """The class name the engine loads (None: it refuses), and the list
        it resolved from after its rewrites."""
        if not architectures and isinstance(model_type, str) and model_type in self.default_architectures:
            architectures = list(self.default_architectures[model_type])
        if not isinstance(architectures, list) or not architectures:
            return None, []
        names = [a for a in architectures]
        first = names[0]
        if isinstance(first, str):
            for prefix, replacement in self.first_entry_prefix_rewrites:
                if first.startswith(prefix):
                    first = replacement
                    break
            else:
                if not any(s in first for s in self.keep_substrings):
                    first = self.first_entry_exact_rewrites.get(first, first + self.appended_suffix)
            names[0] = first
        for name in names:
            if isinstance(name, str) and self.aliases.get(name, name) in self.registered:
                return self.aliases.get(name, name), names
        return None, names


@record
class EngineProfile:
    """One engine at one revision: its loader for each family it serves and its profile-wide facts."""

    name: str
    revision: str
    commit: str
    repository: str
    description: str
    loaders: Mapping[str, FamilyLoader]
    architectures: ArchitectureResolution
    # Environment variables an earlier revision read and this one ignores.
    ignored_env_vars: tuple[str, ...] = ()
    # Finding code -> severity where this engine's loader makes a file-level
    # problem harmless (it never reads the field) or worse.
    severity_overrides: Mapping[str, str] = field(default_factory=dict)
    severity_sources: Mapping[str, Source] = field(default_factory=dict)
    # Config keys that make the engine build quantized layers (scale
    # parameters a plain floating-point draft does not ship), and where.
    quantization_keys: tuple[str, ...] = ()
    quantization_source: Source | None = None
    # model_type values whose config class builds `text_config` into a
    # config object; on any other, a `text_config` key in the draft's
    # config.json fails the engine's config loader, and where.
    text_config_model_types: tuple[str, ...] = ()
    text_config_source: Source | None = None
    # Whether the loader takes a null `text_config` as none at all (the
    # draft's config is its own text config) rather than refusing it.
    text_config_null_is_absent: bool = False
    # Keys the engine then reads from the text_config it adopts as the
    # draft's text config (a missing one stops it at startup), and where.
    text_config_requires: tuple[str, ...] = ()
    text_config_requires_source: Source | None = None
    # Trainers whose own config shape this engine parses as it is (a
    # speculators config for an engine that reads one): no SRV001 for it,
    # and the draft is judged through dspark's reading of that shape.
    native_config_shapes: tuple[str, ...] = ()
    # The engine reads a folder's `*.pt` files when it has no `*.safetensors`
    # and no `*.bin` (as it reads a .bin: the file's top-level entries).
    reads_pt: bool = False
    # The server flags whose values change a verdict on this release, and
    # the rule that judges a draft under them (schema/engines/launch.py);
    # None: dspark models no launch flag here (each given one is named as
    # ignored).
    launch_model: Any = None

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.revision}"

    def loader_for(self, family: str) -> FamilyLoader | None:
        return self.loaders.get(family)

    def registers_unjudged(self, architectures: tuple[str, ...]) -> bool:
        """Whether this engine registers one of a family's classes
        (`architectures`) that it has no loader for here: it loads such a
        draft, and dspark cannot judge it on this engine (ENG007, not ENG006)."""
        return any(name in self.architectures.registered for name in architectures)


SERVE_ELSEWHERE = "Serve the draft on an engine that honours it, or retrain without it."


def served_wrong(config_file: str, text: str, source: Source, feature: str, fix: str = SERVE_ELSEWHERE) -> Finding:
    """ENG001, for any engine: the draft loads and the model computes
    something other than what the config says, without a word."""
    return Finding(
        "ENG001",
        f"{config_file}: {text} ({source.cite()}). {fix}",
        file=config_file,
        detail={"feature": feature, "source": source.cite()},
    )

