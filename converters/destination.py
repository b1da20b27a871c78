"""Where `dspark convert` may write: never into its input, never over
its input, into a new or an empty folder, and with `--force` over a folder
it wrote itself. Checked when the plan is made and again just before the move.
"""

from __future__ import annotations

import os
from pathlib import Path

from dspark.converters.layouts.hf import MANIFEST_NAME
from dspark.converters.writers.manifest import written_by_convert
from dspark.schema.errors import UsageError
from dspark.schema.inventory import printable_name


def is_empty_folder(path: Path) -> bool:
    """A real folder (not a link to one) with nothing in it."""
    try:
        return path.is_dir() and not path.is_symlink() and next(os.scandir(path), None) is None
    except OSError:
        return False


def check_paths(src: Path, dst: Path, *, force: bool, writing: bool = True) -> bool:
    """Refuse destinations that would clobber the input or an existing
    folder; returns whether an existing destination will be replaced (an
    empty folder is written into, not replaced). `writing=False` (a plan,
    which writes nothing) does not need --force for an existing one."""
    source = src.resolve()
    target = dst.resolve()
    shown_src, shown_dst = printable_name(str(src)), printable_name(str(dst))
    if target == source or source in target.parents:
        raise UsageError(
            f"{shown_dst} is inside the input {shown_src}; convert never writes into its input.",
            hint="Choose a destination outside the source folder.",
        )
    if target in source.parents:
        raise UsageError(
            f"{shown_src} is inside the destination {shown_dst}; replacing it would delete the input.",
            hint="Choose a destination that does not contain the source.",
        )
    exists = dst.exists() or dst.is_symlink()
    if exists and is_empty_folder(dst):
        return False
    if exists and not force and writing:
        raise UsageError(
            f"{shown_dst} already exists and is not an empty folder.",
            hint="Pass --force to replace it (it is replaced only once the new one is complete), or pick another "
            "path (a new or an empty folder needs no --force).",
        )
    if exists and not dst.is_dir():
        raise UsageError(f"{shown_dst} exists and is not a folder; refusing to replace it.", hint="Pick another destination.")
    if exists and force:
        refuse_to_replace_others_work(dst)
        if writing and os.path.ismount(dst):
            # --force renames the finished folder over the old one; a mount
            # point can be neither renamed nor removed (only an empty one is
            # written in place, atomic.writes_in_place).
            raise UsageError(
                f"{shown_dst} is a mount point that is not empty: --force replaces a folder by renaming the "
                "complete new one over it, and a mount point cannot be renamed or removed.",
                hint="Empty it first (it is written in place, the manifest last), or convert into a new folder "
                "inside it.",
            )
    if dst.parent.exists() and not dst.parent.is_dir():
        raise UsageError(f"{printable_name(str(dst.parent))} is not a folder.", hint="Pick another destination.")
    return exists


# How many of the entries --force would lose a refusal names.
SHOWN_ENTRIES = 5


def refuse_to_replace_others_work(dst: Path) -> None:
    """--force replaces only what convert itself wrote (a folder whose
    manifest accounts for every entry in it) or an empty folder. Anything
    else -- a target model's folder, a git checkout, notes, a draft someone
    copied in by hand -- may be the only copy of someone's work: refuse,
    naming what would be lost."""
    shown = printable_name(str(dst))
    try:
        has_manifest, unaccounted = written_by_convert(dst)
    except (ValueError, OSError) as error:
        raise UsageError(
            f"{shown} has a {MANIFEST_NAME} that cannot be read ({error}); --force cannot tell that "
            "dspark wrote this folder, so it will not replace it.",
            hint="Check the destination path; remove that folder yourself if you really mean to replace it.",
        ) from None
    if not unaccounted:
        return
    listed = ", ".join(unaccounted[:SHOWN_ENTRIES])
    if len(unaccounted) > SHOWN_ENTRIES:
        listed += f" and {len(unaccounted) - SHOWN_ENTRIES} more"
    why = (f"holds {len(unaccounted)} entr{'y' if len(unaccounted) == 1 else 'ies'} its {MANIFEST_NAME} does not list"
           if has_manifest else f"was not written by dspark convert (no {MANIFEST_NAME})")
    raise UsageError(
        f"{shown} {why}; --force would delete {listed}. --force only replaces a folder that "
        "dspark convert wrote, or an empty one.",
        hint="Check the destination path, or convert into a new folder; remove that folder yourself "
        "if you really mean to replace it.",
    )
