"""Names as training frameworks store them.

Trainers wrap the draft module (FSDP, torch.compile, activation
checkpointing, the trainer's own `draft_model` / `model` attributes), and
each wrapper puts a prefix into every state-dict key. `strip_wrappers`
turns a stored key back into the module-relative name, which is what
`dspark convert` writes and what the contents verdict judges. The serving
engine strips far less (see `dspark.schema.engines`).
"""

from __future__ import annotations

# Wrappers that training frameworks put around names. Leading ones are
# stripped repeatedly; infix ones (FSDP, torch.compile) wherever they sit.
LEADING_WRAPPER_PREFIXES = ("draft_model.", "model.", "_orig_mod.", "_fsdp_wrapped_module.")
INFIX_WRAPPERS = ("_orig_mod.", "_fsdp_wrapped_module.", "_checkpoint_wrapped_module.")


def strip_wrappers(stored_name: str) -> str:
    """`draft_model.model.layers.0._fsdp_wrapped_module.mlp.up_proj.weight`
    -> `layers.0.mlp.up_proj.weight`."""
    name = stored_name
    for wrapper in INFIX_WRAPPERS:
        name = name.replace("." + wrapper, ".")
    changed = True
    while changed:
        changed = False
        for prefix in LEADING_WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name = name[len(prefix):]
                changed = True
    return name
