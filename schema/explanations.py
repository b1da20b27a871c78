"""What each finding code means, as data beside the vocabulary.

`FINDING_CODES` (schema/findings.py) gives a code's severity and title; an
`Explanation` adds why the serving engine (or the deploy) cares and what to
do, and names the engine facts the code's rule is tied to. The sources of
those facts are not written here: `rule_sources` reads them off the engine
profiles (schema/engines/), so the citation printed by `dspark explain`,
written into docs/codes.md and linked from SARIF is always the one the rule
itself uses, for every engine and family the registries hold.

Why this module is long: it is one table, a paragraph per finding code, and
a code's text belongs beside the others of its group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from dspark.schema.engines.base import EngineProfile, Source
from dspark.schema.findings import FINDING_CODES, FindingCode

# Where every code is documented, relative to the repository root; a code's
# own entry is the anchor `#CODE` (docs/codes.md is generated: dspark.cli.docs).
CODES_PAGE = "docs/codes.md"


def code_page(code: str) -> str:
    """The documentation link of `code`: `docs/codes.md#CODE`."""
    return f"{CODES_PAGE}#{code}"


# A code's group is its three letters: what each group is about, in the
# vocabulary's order (docs/codes.md has one section per group).
GROUPS: dict[str, str] = {
    "CFG": "config.json",
    "FCN": "fc_norm",
    "CTX": "the context projection",
    "FEA": "norm_before_fc (EAGLE-3 on Llama)",
    "TAP": "EAGLE-3 taps",
    "LMH": "the draft's own head",
    "VOC": "the draft-to-target token map (d2t)",
    "STR": "aux_hidden_stream",
    "TGT": "the target (--target)",
    "SRV": "whether the engine can open the folder",
    "ENG": "how the engine reads the draft",
    "OVR": "dflash_config overrides",
    "ROP": "RoPE",
    "SWA": "sliding-window attention",
    "LCH": "the launch (--launch): server flags a verdict depends on",
    "INV": "the tensor inventory",
    "STF": "safetensors files",
    "IDX": "sharded indexes",
    "PAY": "payload values (--deep)",
    "MAN": "dspark-manifest.json",
    "CNV": "dspark convert's casts",
    "SRC": "training outputs read by dspark convert",
    "SMK": "dspark smoke",
    "RUN": "the serving engine installed (check --runtime)",
}


@dataclass(frozen=True)
class Explanation:
    why: str
    action: str
    # Engine facts the rule reads, by name: a key of `FamilyLoader.sources`
    # ("load_weights", "taps vs target", ...) or one of `_FACTS` below.
    engine_facts: tuple[str, ...] = ()


# Engine facts that are not a `FamilyLoader.sources` key: where they sit.
_FACTS = {
    "features": "each declared feature's FeatureSupport",
    "unread_flags": "flags the loader never reads",
    "feature norm_output": "the loader's norm_output feature (what the key means to the engine)",
    "skips": "names the loader skips",
    "fused": "parameters the loader fuses",
    "stream": "how the drafter resolves the stream",
    "architectures": "how the engine resolves architectures",
    "quantization": "config keys that make the engine quantize",
    "text_config": "the config loader's text_config handling",
    "severity": "the engine's severity for this code",
    "tap numbering": "where the engine reads tap ids and what an id means",
}


def _x(why: str, action: str, *facts: str) -> Explanation:
    return Explanation(why, action, facts)


EXPLANATIONS: dict[str, Explanation] = {
    # config.json
    "CFG001": _x("The engine builds the draft from config.json; without one beside the weights nothing can be "
                 "loaded or judged.",
                 "Put the draft's config.json beside the weights, or pass --config FILE (convert, check)."),
    "CFG002": _x("A config.json that is not one JSON object (a list, a syntax error, a key given twice) is refused "
                 "by the engine's config loader, or read differently by each JSON parser.",
                 "Rewrite config.json as one strict JSON object; the message names the line and the problem."),
    "CFG003": _x("A field outside the family's JSON Schema (a wrong type, a non-positive size, a value past any "
                 "real model) builds a model the weights do not fit, or none at all.",
                 "Fix the field the message names; the family's schema under schema/families/ says what is "
                 "allowed and why."),
    "CFG004": _x("Without a family dspark knows there is no contract to judge against, and the engine refuses "
                 "architectures it does not register.",
                 "Set architectures (and model_type) to a family `dspark families` lists, or convert the "
                 "trainer's output with `dspark convert`.", "architectures"),
    "CFG005": _x("The draft's context projection is built for num_target_layers taps; a different number of tap "
                 "ids gives a projection of the wrong width or taps the engine refuses.",
                 "Make target_layer_ids list exactly num_target_layers ids: the layers the draft was trained on.",
                 "taps vs target"),
    "CFG006": _x("The target's capture setter takes distinct ids; the order of the concatenated taps is the order "
                 "the draft was trained with, so a shuffled or repeated list feeds the wrong hidden states.",
                 "List the tap ids once each, in ascending order, as the draft was trained.", "taps vs target"),
    "CFG007": _x("A tap outside the target's layers cannot be captured: the engine refuses it at startup.",
                 "Use tap ids in [0, target_num_hidden_layers).", "taps vs target"),
    "CFG008": _x("Block drafts mark the positions to draft with mask_token_id; the drafter requires it and an id "
                 "outside the vocabulary indexes past the embedding.",
                 "Set mask_token_id to the mask token the draft was trained with, in [0, vocab_size)."),
    "CFG009": _x("The K3 model never reads draft_vocab_size (both Markov tables are vocab_size rows), so a "
                 "different value is a sign the config was edited by hand or copied from another draft.",
                 "Remove draft_vocab_size or set it equal to vocab_size."),
    "CFG010": _x("NaN and Infinity are not JSON: Python reads them, other loaders refuse them or read another "
                 "value, so the served config depends on the parser.",
                 "Write finite numbers (json.dump(..., allow_nan=False) refuses them)."),
    "CFG011": _x("The engine's config loader requires a text_config to be a config object; on a draft config "
                 "class it is a plain dict, and the engine refuses to start.",
                 "Move the fields out of text_config to the top level of the draft's config.json.",
                 "text_config"),
    # fc_norm
    "FCN001": _x("A draft that declares fc_norm is served with a norm per tap; without the trained weights the "
                 "norms are missing parameters and the load fails (or serves uninitialised ones).",
                 "Ship the fc_norm.{i}.weight tensors the training wrote, or set fc_norm to false if the draft "
                 "was trained without it.", "features", "load_weights"),
    "FCN002": _x("Weights shipped without the declaration are refused as unexpected by a strict loader, or "
                 "ignored by a lenient one: then the taps reach the projection unnormalised and acceptance "
                 "drops without a word.",
                 "Set fc_norm: true if the draft was trained with it; otherwise remove the weights.",
                 "features", "load_weights"),
    "FCN003": _x("The engine builds one fc_norm per tap, fc_norm.0 .. fc_norm.{S-1}; an extra, missing or "
                 "misnumbered weight fails the load.",
                 "Ship exactly one fc_norm.{i}.weight per tap, numbered from 0.", "load_weights"),
    "FCN004": _x("Each fc_norm normalises one tap of target_hidden_size values; another shape fails the load.",
                 "Ship fc_norm weights of shape [target_hidden_size]."),
    "FCN005": _x("A norm weight is a floating-point scale; an integer tensor cannot be it.",
                 "Export the fc_norm weights in the draft's floating-point dtype."),
    "FCN006": _x("An fc_norm weight of exactly ones is the identity: what an untrained or lost norm looks like.",
                 "Check the export kept the trained fc_norm weights; waive the code only if ones were trained."),
    "CTX001": _x("The context projection concatenates every tap: its input width must be taps x the target's "
                 "hidden size, or the engine's matmul fails.",
                 "Check num_target_layers and target_hidden_size against the shipped projection.", "fc width"),
    # norm_before_fc
    "FEA001": _x("A draft declaring norm_before_fc is served with an input_norm over the concatenated taps; the "
                 "weight must be shipped.",
                 "Ship input_norm.weight, or set norm_before_fc to false if the draft was trained without it.",
                 "features"),
    "FEA002": _x("An input_norm weight without the declaration is dropped by the loader, so the taps reach fc "
                 "unnormalised.",
                 "Set norm_before_fc: true if the draft was trained with it; otherwise remove the weight.",
                 "features"),
    # EAGLE-3 taps
    "TAP001": _x("EAGLE-3's fc is built for the number of taps the draft names; the target captures its own list. "
                 "A different count fails at the first request or feeds fc the wrong width.",
                 "Give the draft the tap ids it was trained on, in the field this engine reads.",
                 "taps (draft)", "taps (target)"),
    "TAP002": _x("The engine reads the tap list from one place; a list elsewhere (another trainer's field, "
                 "eagle_config) is not the one served.",
                 "Write the trained tap ids where the engine reads them (dspark convert does).",
                 "taps (target)"),
    "TAP003": _x("Without tap ids the engine captures its default three layers; that is right only if the draft "
                 "was trained on them.",
                 "Nothing, if the draft was trained on the target's defaults; otherwise write the trained ids.",
                 "taps (target)"),
    "TAP004": _x("A tap id means another layer under each trainer's numbering (layer output for SGLang, SpecForge "
                 "and TorchSpec; hidden_states index for vLLM and speculators): dspark says which it read the ids "
                 "in, and from what in the folder.",
                 "Nothing, if the origin named is right; otherwise fix the folder (or its run's config.yaml).",
                 "tap numbering"),
    "TAP005": _x("Nothing in the folder says which trainer wrote the tap ids, so the layers the draft was trained "
                 "on are one of two sets, one layer apart: an engine may serve it the wrong ones without a word.",
                 "Check the ids against the training run; convert from the trainer's own output so its origin is "
                 "known.", "tap numbering"),
    "TAP006": _x("The engine reads the list the draft was trained on but numbers it otherwise: it captures layers "
                 "one off from the trained ones and serves the draft wrong, without a word.",
                 "Write the ids in that engine's numbering (dspark convert --engine), or serve on an engine that "
                 "numbers them as the trainer did.", "tap numbering"),
    "TAP007": _x("The engines asked for read the tap ids from different places or number them differently, so "
                 "one folder taps different layers on each.",
                 "Serve on the engines that capture the trained layers (TAP004), or write the ids where each "
                 "engine reads them.", "tap numbering"),
    # heads and token maps
    "LMH001": _x("The engine serves the target's head (or the tied embedding) in place of the shipped lm_head: "
                 "the shipped tensor costs bytes and is never used.",
                 "Drop the lm_head from the export, or set the config so the engine serves it (draft_vocab_size).",
                 "lm_head"),
    "LMH002": _x("With tie_word_embeddings true the engine serves the embedding as the head; a trained head that "
                 "differs from it is silently dropped.",
                 "Set tie_word_embeddings to false so the trained head is served.", "lm_head"),
    "VOC001": _x("A head with fewer rows than the vocabulary needs d2t to map draft tokens to target tokens; "
                 "without it the draft proposes the wrong tokens.",
                 "Ship the d2t table the training wrote.", "d2t"),
    "VOC002": _x("The engine adds d2t to the draft token ids; a table of the wrong length or dtype maps tokens "
                 "wrongly or fails. vLLM copies a float table into its int64 one, truncating each entry toward "
                 "zero: a fractional entry the head can produce, or a dtype too narrow for the vocabulary's "
                 "offsets, serves other tokens.",
                 "Ship d2t as an integer table of draft_vocab_size entries.", "d2t"),
    "VOC003": _x("A d2t entry that maps outside the target vocabulary makes the draft propose ids the target "
                 "does not have.",
                 "Regenerate d2t from the draft and target vocabularies.", "d2t"),
    # aux_hidden_stream
    "STR001": _x("The drafter validates aux_hidden_stream and refuses any value but prefix or attn_res at "
                 "startup.",
                 "Set aux_hidden_stream to prefix or attn_res: the stream the draft was trained on.", "stream"),
    "STR002": _x("Which residual stream the draft reads decides what it was trained on; the note says which "
                 "one the engine serves and from which field.",
                 "Nothing: check it is the stream the draft was trained on.", "stream"),
    "STR003": _x("The drafter of pull request 1016 reads this variable before the checkpoint, and the target "
                 "refuses any stream but prefix and attn_res at startup.",
                 "Unset TOKENSPEED_DFLASH_AUX_STREAM, or set it to prefix or attn_res.", "stream"),
    "STR004": _x("No current revision reads TOKENSPEED_DFLASH_AUX_STREAM: an A/B run that sets it is served the "
                 "checkpoint's stream, not the one asked for.",
                 "Unset the variable; change aux_hidden_stream in config.json to serve another stream."),
    "STR007": _x("The drafter of pull request 1016 serves the variable's stream over the checkpoint's: the draft "
                 "is fed a residual stream it was not trained on, without a word.",
                 "Unset TOKENSPEED_DFLASH_AUX_STREAM for this deploy, or set it to the draft's stream.", "stream"),
    "STR008": _x("The engine reads aux_hidden_stream at the top level only (TokenSpeed 0.1.1's K3 config class), "
                 "so a value in dflash_config, valid or not, is never read: the top level's stream is served. The "
                 "engine is consistent with itself, but whoever reads the nested value (the trainer, another "
                 "engine) was told another stream. Declared there alone, it is served wrong (ENG001).",
                 "Declare the stream the draft was trained on at the top level, and make dflash_config agree or "
                 "drop it there.", "stream"),
    "STR005": _x("Only a target with a positive attn_res_block_size can supply the attn_res stream; without "
                 "--target that cannot be checked.",
                 "Run with --target pointing at the target model's config.", "stream vs target"),
    "STR006": _x("The target has no AttnRes blocks, so the stream the draft reads does not exist there.",
                 "Serve the draft on a target with attn_res_block_size > 0, or use a prefix-stream draft.",
                 "stream vs target"),
    # --target
    "TGT001": _x("The target's config is what the draft is judged against; unreadable, it judges nothing.",
                 "Point --target at the target model's folder or config.json with hidden_size, num_hidden_layers "
                 "and vocab_size."),
    "TGT002": _x("Each tap is one of the target's hidden states; a different width fails the projection.",
                 "Serve the draft on the target it was trained for, or fix target_hidden_size."),
    "TGT003": _x("The engine never compares the layer counts, but a different count means the draft was trained "
                 "for another target.",
                 "Check the draft was trained for this target; fix target_num_hidden_layers."),
    "TGT004": _x("The draft proposes token ids; a larger vocabulary proposes ids the target lacks, unless a d2t "
                 "keeps every proposal inside the target's vocabulary.",
                 "Serve the draft on the target whose tokenizer it was trained with.", "embedding"),
    "TGT005": _x("The target's capture setter refuses ids outside its range at startup.",
                 "Use tap ids inside the target's capture range (the message gives it).", "taps vs target"),
    "TGT006": _x("The target's model class never captures hidden states, so the draft gets none.",
                 "Serve the draft on a target class that captures (the message lists them).", "target classes"),
    "TGT007": _x("The drafter wires itself to the target's embedding, head and capture setter; a class lacking "
                 "one stops the engine at startup.",
                 "Serve the draft on a target class its drafter wires to (the message lists them).",
                 "target classes"),
    "TGT008": _x("A Kimi-K3 target numbers EAGLE-3 tap ids from one: the draft's ids are read one layer later "
                 "than written.",
                 "Check the ids were written for this numbering.", "taps vs target"),
    "TGT009": _x("Without --target, the config's own count of the target's layers (target_num_hidden_layers; a "
                 "DFlash draft's num_target_layers, which SpecForge writes and SGLang reads as the target's layer "
                 "count) bounds the taps: an id the engine's capture range excludes on a target of that many "
                 "layers is refused at startup or never captured (SGLang and TokenSpeed capture a DFlash id k "
                 "entering layer k+1, so the last layer's id is never reached). An EAGLE-3 config states the "
                 "count only where a user writes it (no trainer does, no engine reads it); its list is judged the "
                 "same way, and with no list the engine reads, the target's default taps on a target of that "
                 "depth, which on a shallow one name a layer twice and leave fc a tap short.",
                 "List the layers the draft was trained on, inside the range the message gives; if the stated "
                 "count is wrong, fix it or check with --target.", "taps vs target"),
    # the engine
    "SRV001": _x("The engine opens a folder of top-level safetensors under the names its loader knows; a DCP "
                 "folder, a .pt, wrapped names or a config type it cannot parse are not servable as they are.",
                 "Run the `dspark convert SRC DST` command the message prints; check --contents judges only "
                 "what is inside.", "config types", "load_weights"),
    "ENG001": _x("The engine does not build what the draft declares or ships (a feature, a stream, a flag): it "
                 "refuses the weights, or loads and serves the draft without it, silently.",
                 "Serve on an engine revision that honours the feature (--engine), or retrain without it.",
                 "features", "unread_flags", "stream"),
    "ENG002": _x("The engine loads the first registered class after its own rewrites of architectures; another "
                 "class builds another model from the same weights.",
                 "Put the draft's own class first in architectures.", "architectures"),
    "ENG003": _x("The engine's config class coerces values (int(), bool(), lower()) or fills in defaults: the "
                 "draft loads, but another loader may read it differently.",
                 "Write the value the engine uses, as the message says.", "config"),
    "ENG004": _x("A launch flag must match the draft (the verify width must fit block_size) or the engine "
                 "refuses it at startup.",
                 "Launch with the setting the message names.", "block size"),
    "ENG005": _x("A quantization block makes the engine build quantized layers whose scales the draft does not "
                 "ship: the load fails.",
                 "Remove quantization_config from a floating-point draft's config.", "quantization"),
    "ENG006": _x("The engine has no model for this draft family: it refuses the draft, whatever the folder holds.",
                 "Serve the draft on an engine that serves the family (dspark families --family NAME)."),
    "ENG007": _x("The config names a draft class (architectures, model_type) that dspark has no rules for. The "
                 "engine may refuse it (it registers no such class) or load it (it does, and then nothing here "
                 "says whether it is served as trained): either way a gate cannot pass it on dspark's word. The "
                 "message says which, from the engine's registry as modelled.",
                 "Check the draft by other means before deploying it, or name a family dspark models "
                 "(dspark families); ask for the family to be modelled."),
    "ENG008": _x("One key, two meanings. SpecForge reads norm_output as 'the logits go through the final norm' "
                 "(default true) and trains feeding the un-normed state back; speculators and every engine read it "
                 "as 'feed the post-norm state back' (default false) and always norm the logits. A SpecForge draft "
                 "(midlayer.* names, no other trainer's sign) with norm_output true is served feeding the normed "
                 "state back; with false, its un-normed head is served the normed state. Absent, both readings "
                 "agree.",
                 "Remove norm_output true (or `dspark convert --engine ...`, which writes false, the engine's "
                 "meaning of how it was trained); a draft trained with norm_output false cannot be served as "
                 "trained: retrain with SpecForge's default.",
                 "feature norm_output"),
    "CNV002": _x("The engine skips this tensor at its default launch but loads it under another it supports "
                 "(TokenSpeed 0.1.1's K3 DSpark model loads the draft's own embed_tokens on the last pipeline stage "
                 "when --pipeline-parallel-size > 1, and refuses a draft without it), so convert keeps it: the "
                 "output serves every launch.",
                 "Nothing to do; --keep-skipped keeps the other skipped tensors too."),
    "LCH001": _x("Some verdicts depend on the server flags, not only the folder: TokenSpeed 0.1.1 stops when "
                 "--speculative-num-steps disagrees with the checkpoint's block size, and at "
                 "--pipeline-parallel-size > 1 runs only K3 DSpark drafts, whose last stage loads the draft's own "
                 "embed_tokens and refuses a quantized draft. At the launch given (--launch, or the settings' "
                 "launch) the engine refuses this draft, or the launch itself.",
                 "Launch with the flags the message names, or fix the draft for the launch you deploy.",
                 "block size"),
    "LCH002": _x("At the launch given the engine loads the draft without a word but computes with other numbers "
                 "than the trained ones (an integer embed_tokens cast into a floating-point embedding on "
                 "TokenSpeed 0.1.1's last pipeline stage).",
                 "Ship the tensor in the draft's floating-point dtype."),
    "LCH003": _x("Without --launch the engine's defaults are judged (pipeline-parallel size 1, speculative widths "
                 "taken from the checkpoint); this verdict would be another under another launch, so the gate "
                 "cannot vouch for every deploy. The message names the setting, the verdict under each value and "
                 "the flags that serve the draft as trained.",
                 "Pass the server flags you deploy with (--launch, or launch in dspark.toml); launch with the flags "
                 "the message names.", "block size"),
    "LCH004": _x("Which of the launch's flags dspark read on this engine, and which change no verdict it models "
                 "(named, so nothing is judged on a flag silently dropped).",
                 "Nothing to do; check the ignored flags are ones no verdict depends on."),
    "LCH005": _x("The launch's speculative widths are the ones the checkpoint's block size was trained at (or "
                 "the checkpoint declares none, and the launch's are used).",
                 "Nothing to do."),
    "LCH006": _x("The launch as given stops the server whatever the draft (TokenSpeed 0.1.1 runs "
                 "--pipeline-parallel-size > 1 with a draft only with --disaggregation-mode prefill); the draft "
                 "is judged as served by the server the launch asks for.",
                 "Add the flag the message names."),
    "LCH007": _x("At the launch given the loader drops a tensor it refuses at the default launch (TokenSpeed "
                 "0.1.1's pipeline stages load only the fc_norm of the taps they own): the draft loads there.",
                 "Remove the tensor, so the draft loads at every launch."),
    "LCH008": _x("The engine ties the speculative widths to the checkpoint's block size (TokenSpeed 0.1.1: DSpark "
                 "block_size == --speculative-num-steps, DFlash block_size == steps + 1, or the server stops; "
                 "SGLang 0.5.23: --speculative-num-draft-tokens is the DFlash block size, or the draft is served at "
                 "another). Without those flags the engine takes them from the checkpoint and serves the draft as "
                 "trained; the message names the flags that do the same.",
                 "Launch with the flags the message names, or leave them out; pass --launch to judge your own.",
                 "block size"),
    "OVR001": _x("A value declared in dflash_config and at the top level, differently (taps, mask token, "
                 "aux_hidden_stream, sliding window): the engine serves one of them (the message says which, "
                 "mostly the nested one, validated or not), and which one the draft was trained with cannot "
                 "be told.",
                 "Make dflash_config agree with the top level, or remove the duplicate."),
    "ROP001": _x("YaRN scaling needs its factor; the engine's rotary embedding fails without it.",
                 "Complete rope_scaling / rope_parameters as the draft was trained."),
    "ROP002": _x("The engine (or transformers) fills in or replaces RoPE parameters: the served rotation may not "
                 "be the trained one.",
                 "Write every RoPE parameter the draft was trained with."),
    "ROP003": _x("The drafter is fed the target's positions, up to the server's max_model_len, while the draft's "
                 "rotary cache is built from its own max_position_embeddings. vLLM 0.30.0-0.32.0 raise that "
                 "value to the target's length for EAGLE drafts only (DFlash and DSpark keep theirs), and a raise "
                 "changes the frequencies of dynamic and longrope RoPE and leaves a YaRN cache its size: "
                 "positions past the cache gather outside it, or every position is rotated otherwise than in "
                 "training. Nothing checks or logs it.",
                 "Launch with a --max-model-len the draft reaches, serve it on a release that raises its length "
                 "(vLLM 0.33.0 for RoPE that only sizes its cache), or write the length the draft reaches."),
    "ROP004": _x("vLLM 0.33.0 leaves the length of a draft whose RoPE derives more than its cache size from "
                 "max_position_embeddings (yarn, dynamic, longrope), and Model Runner V2 lowers the server's "
                 "max_model_len to the draft's: served as trained, on a shorter context than the target's, with "
                 "a warning in the log only.",
                 "Nothing, if that context is enough; else serve a draft trained for the target's context."),
    "ROP005": _x("The engine raises the draft's max_position_embeddings to the served length; its RoPE only sizes "
                 "the cache by it, so the rotation is the trained one.",
                 "Nothing to do."),
    "SWA001": _x("Sliding-window layers need a window size; the engine cannot build them without one.",
                 "Set sliding_window to the trained window.", "sliding layers"),
    # inventory
    "INV001": _x("A parameter the model builds and nothing fills: a strict loader fails, a lenient one serves "
                 "uninitialised memory.",
                 "Ship the tensor, or fix the config that implies it.", "load_weights", "fused"),
    "INV002": _x("A tensor with no destination: a strict loader fails the load, a lenient one drops it (and "
                 "whatever it was trained to do).",
                 "Remove it, rename it to the engine's name (dspark convert), or declare the feature it belongs to.",
                 "load_weights", "fused"),
    "INV003": _x("The engine builds each parameter from the config; a tensor of another shape fails the load.",
                 "Fix the config field the shape comes from (the message names it) or re-export the tensor; "
                 "findings on the config above often explain these.", "load_weights"),
    "INV004": _x("Weights are floating point; an integer tensor under a weight's name is not one.",
                 "Re-export the tensor in the draft's floating-point dtype."),
    "INV005": _x("The loader skips these names on purpose (borrowed from the target, training-only): harmless, "
                 "but shipped for nothing.",
                 "Nothing; drop them to save bytes (dspark convert does).", "skips"),
    "INV006": _x("Two stored names land on one parameter; the one read last wins.",
                 "Keep one copy of the tensor.", "load_weights"),
    "INV008": _x("The loader writes a fused parameter from the pre-fused tensor and from each part it finds: every "
                 "part's rows hold whichever tensor it read last, which may depend on file order.",
                 "Ship either the pre-fused tensor or its parts, not both.", "fused", "load_weights"),
    "INV007": _x("float32 weights cost twice the bytes of bfloat16 and may be cast at load.",
                 "Convert with --dtype bfloat16 if the draft is served in bfloat16."),
    # files
    "STF001": _x("A malformed safetensors header or payload is refused by the loader (or read wrongly).",
                 "Re-export the file; the message names what is wrong in it."),
    "IDX001": _x("The sharded index tells the loader which files to read; an invalid one is refused or misread.",
                 "Regenerate model.safetensors.index.json from the shards."),
    "IDX002": _x("A shard the index names is missing; its tensors are missing from the draft.",
                 "Copy the missing shard, or regenerate the index.", "severity"),
    "IDX003": _x("The index says a tensor lives in a shard that does not hold it.",
                 "Regenerate the index from the shards.", "severity"),
    "IDX004": _x("A tensor the index does not list may not be loaded by a loader that trusts the index.",
                 "Regenerate the index from the shards.", "severity"),
    "IDX005": _x("A tensor in two shards is loaded twice, the last read winning.",
                 "Keep one copy."),
    "IDX006": _x("The index's total_size disagrees with the shards: a stale or hand-edited index.",
                 "Regenerate the index.", "severity"),
    "IDX007": _x("A shard name with folders or .. could read a file outside the checkpoint.",
                 "Name shards as plain files inside the folder."),
    # payloads
    "PAY001": _x("NaN or Inf in a weight poisons every activation it touches: the draft proposes garbage.",
                 "Re-export from a healthy training step."),
    "PAY002": _x("An all-zero norm zeroes its input: the draft's output is constant.",
                 "Check the export kept the trained norm weights."),
    "PAY003": _x("A payload that cannot be read cannot be loaded either.",
                 "Re-copy the file; the message names the tensor and why."),
    "PAY004": _x("An all-zero weight matrix is what a lost or never-written tensor looks like.",
                 "Check the export kept the trained weights."),
    "PAY005": _x("A header-only check sees names, shapes and dtypes, not values: NaN, Inf and zeroed weights "
                 "pass it.",
                 "Run with --deep (or dspark gate) before deploying."),
    "PAY006": _x("A weight file that is mostly a hole on disk was preallocated and never written: an unfinished "
                 "download or copy. Its payload reads as zeros, which the engine loads and serves; an error, so "
                 "a header-only check fails it as the gate's full read does. Flagged only with a wide margin: "
                 "fewer than half the payload bytes allocated and at least 1 MiB missing.",
                 "Download or copy the file again."),
    "PAY007": _x("A file written as a header over a hole on purpose (dspark's fabricator of full-size drafts for "
                 "header-only checks marks its files `dspark_payload: hole` in the safetensors metadata) is "
                 "said to be one, not judged as an unfinished download; its values are zeros.",
                 "Nothing, for a fixture; never deploy one. A real draft has no such mark."),
    # manifest
    "MAN001": _x("dspark-manifest.json records what convert wrote; an invalid one verifies nothing.",
                 "Re-run dspark convert, or remove the manifest."),
    "MAN002": _x("The folder differs from what convert wrote: a tensor renamed, moved, reshaped or removed.",
                 "Re-run dspark convert, or find who edited the folder."),
    "MAN003": _x("A tensor's bytes differ from what convert wrote: corruption or an edit.",
                 "Re-copy the folder from the conversion's output."),
    "MAN004": _x("Every tensor matches the manifest convert wrote.", "Nothing."),
    "MAN005": _x("--verify compares with the manifest; without one there is nothing to verify against.",
                 "Convert with dspark convert (it writes the manifest), or drop --verify."),
    "MAN006": _x("A weight file convert did not write would be loaded by the engine too.",
                 "Remove the file, or re-run dspark convert."),
    # convert
    "CNV001": _x("Casting to a narrower dtype overflows finite values to Inf: the written draft would be broken.",
                 "Keep the dtype (--dtype keep), or cast to bfloat16, whose range holds the values."),
    # training outputs
    "SRC001": _x("A training run holds several iterations; the note says which one was read.",
                 "Name another iteration's folder to read it."),
    "SRC002": _x("Optimizer state and counters are not draft weights; they are left out.",
                 "Nothing."),
    "SRC003": _x("Unpickling more than weights runs code from the file: dspark refuses it.",
                 "Re-save the state dict with torch.save(state_dict) of tensors only, or as safetensors."),
    "SRC004": _x("The DCP or .pt checkpoint is damaged or inconsistent: it cannot be converted as it is.",
                 "Re-copy the checkpoint; the message names the part that is wrong."),
    "SRC005": _x("Another trainer's config shape (speculators) is read as the config convert writes.",
                 "Nothing; dspark convert writes the engine's config."),
    "SRC006": _x("The engine's loader builds this fused parameter only from its parts, so convert writes the "
                 "parts.", "Nothing; serve the converted folder.", "fused"),
    "SRC007": _x("The trainer recorded the value (the run's config.yaml, its defaults) that the draft's own "
                 "config left out; convert writes it.",
                 "Nothing; check it is what the draft was trained with."),
    # smoke
    "SMK001": _x("NaN or Inf in the projection's weights or output: the draft proposes garbage.",
                 "Re-export from a healthy training step."),
    "SMK002": _x("The fused kernel's output differs from the fp32 reference beyond tolerance: the served "
                 "projection is not the trained one.",
                 "Check the kernel on this GPU (dspark doctor); report it with the smoke output."),
    "SMK003": _x("How far the incremental fast path (no fc_norm) lands from the correct output: the cost of a "
                 "serving path that skips the norms.", "Nothing; it is a measurement."),
    "SMK004": _x("The folded incremental path computes the fc_norm draft correctly.", "Nothing."),
    "SMK005": _x("The folded incremental path is outside tolerance: it would serve this draft wrong.",
                 "Serve the fused path for this draft."),
    "SMK006": _x("The Triton kernel did not run here; the reference computed the norm, so the kernel was not "
                 "tested.", "Run smoke on a GPU with triton installed."),
    "SMK007": _x("GPU timings of the norm and the projection.", "Nothing; it is a measurement."),
    "SMK008": _x("All-zero weights or output match anything: nothing was compared.",
                 "Check the export kept the projection weights."),
    # runtime
    "RUN001": _x("The installed engine's K3 DSpark model imports its segmented_rmsnorm at module top and the "
                 "import fails here; the engine imports every model module when it starts, so it serves nothing.",
                 "Install a tokenspeed_kernel that defines segmented_rmsnorm in ops/layernorm/triton, or an engine "
                 "revision with the kernel in its own tree (pull request 1031)."),
    "RUN002": _x("Which segmented_rmsnorm the installed engine serves fc_norm drafts with, and where it comes from.",
                 "Nothing."),
    "RUN003": _x("Which engine is installed here and which known revision its files are; the draft was judged "
                 "with that revision's profile.", "Nothing."),
    "RUN004": _x("The installed engine's files match no revision dspark knows (judged by the nearest), or the "
                 "files its release is told from are not there (an empty or partial install: judged by the same "
                 "engine's newest release, never another engine's): the verdict may not be this engine's.",
                 "Deploy a revision dspark knows, or judge it with --engine after reading its loader."),
    "RUN005": _x("No serving engine was found here, so the verdict is the default profile's, not this machine's.",
                 "Run where the engine is installed, or name its folder with --engine-path."),
    "RUN006": _x("The installed engine is a release dspark does not model (or a build of one it does), and every "
                 "function dspark's rules cite has the same source as in the nearest modelled release of that "
                 "engine (a hash of each definition, read from the installed files): the verdict stands.",
                 "Nothing; the note names the release the draft was judged as."),
    "RUN007": _x("Functions dspark's rules cite differ between the installed engine and the release it is judged "
                 "as (another source, or not defined): the rules read there may not hold, so the verdict is "
                 "that release's guess. The gate fails on it unless its policy waives RUN007.",
                 "Read the named functions in the installed engine; if they serve the draft as the release did, "
                 "waive RUN007 in the policy with that reason, else judge with the release they match."),
    "RUN008": _x("The installed engine registers other draft classes, or lets other target classes capture "
                 "hidden states, than the release it is judged as: read from its files, these lists are the "
                 "installed engine's.",
                 "Nothing, unless the draft's class or its target is among those named."),
    "SMK009": _x("The installed engine's own segmented_rmsnorm is off the fp32 norm: the engine would serve "
                 "this draft's context wrong, whatever dspark's kernel does.",
                 "Do not deploy on this engine install; report the kernel to the engine."),
    "SMK010": _x("The engine's segmented_rmsnorm beside dspark's: both errors and, on a GPU, both times.",
                 "Nothing; it is a measurement."),
    "SMK011": _x("The engine's segmented_rmsnorm could not run here, so only dspark's kernel was tested.",
                 "Run the smoke where the engine serves from (its kernel may need a GPU)."),
    "SMK012": _x("--kernel both on a draft without fc_norm (a GQA DFlash or DFlash2 draft): the engine projects the "
                 "taps with fc and an ordinary RMSNorm and runs no segmented RMSNorm of its own, so there is no "
                 "engine kernel to put beside dspark's; dspark's kernel was tested against the fp32 reference.",
                 "Nothing; --kernel engine, which asks for the engine's kernel alone, refuses such a draft."),
}


@dataclass(frozen=True)
class RuleSource:
    """One engine fact a code's rule is tied to, on the engines that share it."""

    engines: tuple[str, ...]
    family: str | None  # None: engine-wide (architectures, quantization, ...)
    fact: str
    cited: Source
    repository: str

    @property
    def source(self) -> str:
        """`path@commit:lines`, as every citation dspark prints (Source.cite)."""
        return self.cited.cite()

    def to_dict(self) -> dict:
        return {"engines": list(self.engines), "family": self.family, "fact": self.fact, "source": self.source,
                "repository": self.repository, "path": self.cited.path, "lines": self.cited.lines,
                "commit": self.cited.commit}


def _fact_sources(engine: EngineProfile, code: str, fact: str) -> list[tuple[str | None, str, Source]]:
    """(family, label, source) for `fact` on `engine`."""
    found: list[tuple[str | None, str, Source]] = []
    if fact == "architectures":
        return [(None, fact, engine.architectures.source)]
    if fact == "quantization":
        return [(None, fact, engine.quantization_source)] if engine.quantization_source else []
    if fact == "text_config":
        return [(None, fact, engine.text_config_source)] if engine.text_config_source else []
    if fact == "severity":
        source = engine.severity_sources.get(code)
        return [(None, f"severity {engine.severity_overrides.get(code, 'as listed')}", source)] if source else []
    for family, loader in engine.loaders.items():
        if fact.startswith("feature "):
            name = fact.split(" ", 1)[1]
            found += [(family, fact, loader.features[name].source)] if name in loader.features else []
        elif fact == "features":
            found += [(family, f"feature {name}", s.source) for name, s in loader.features.items()]
        elif fact == "unread_flags":
            found += [(family, f"unread {name}", s.source) for name, s in loader.unread_flags.items()]
        elif fact == "skips":
            found += [(family, f"skips /{s.pattern}/", s.source) for s in loader.skips]
        elif fact == "fused":
            found += [(family, f"fuses {f.fused}", f.source) for f in loader.fused]
        elif fact == "tap numbering":
            if loader.taps is not None:
                found += [(family, "tap ids read", loader.taps.source),
                          (family, "tap numbering", loader.taps.numbering.source)]
        elif fact == "stream":
            if loader.stream is not None:
                found.append((family, fact, loader.stream.source))
        elif fact in loader.sources:
            found.append((family, fact, loader.sources[fact]))
    return found


def rule_sources(code: str, engines: Iterable[EngineProfile]) -> list[RuleSource]:
    """Where `code`'s rule was read, on every engine given: one entry per
    (family, fact, citation), naming the engines that share it."""
    explanation = EXPLANATIONS[code]
    by_key: dict[tuple[str | None, str, Source, str], list[str]] = {}
    for engine in engines:
        for fact in explanation.engine_facts:
            for family, label, source in _fact_sources(engine, code, fact):
                key = (family, label, source, engine.repository)
                if engine.spec not in by_key.setdefault(key, []):
                    by_key[key].append(engine.spec)
    return [RuleSource(tuple(specs), family, label, source, repository)
            for (family, label, source, repository), specs in by_key.items()]


def explain(code: str, engines: Iterable[EngineProfile]) -> dict:
    """Everything dspark says about `code`, as data (what `dspark explain
    --format json` prints)."""
    spec: FindingCode = FINDING_CODES[code]
    explanation = EXPLANATIONS[code]
    engines = tuple(engines)
    return {
        "code": code,
        "severity": spec.severity.value,
        # where an engine's loader makes the problem harmless (or worse)
        "severity_by_engine": {e.spec: e.severity_overrides[code] for e in engines if code in e.severity_overrides},
        "title": spec.title,
        "group": code[:3],
        "why": explanation.why,
        "action": explanation.action,
        "engine_facts": list(explanation.engine_facts),
        "sources": [s.to_dict() for s in rule_sources(code, engines)],
        "documentation": code_page(code),
    }


def similar_codes(text: str, limit: int = 3) -> list[str]:
    """Known codes close to `text` (a typo, another case, a missing digit)."""
    import difflib  # only when a code is mistyped: not on every run's start-up

    wanted = text.strip().upper()
    close = difflib.get_close_matches(wanted, FINDING_CODES, n=limit, cutoff=0.5)
    if not close and len(wanted) >= 3:
        close = [code for code in FINDING_CODES if code.startswith(wanted[:3])][:limit]
    return close
