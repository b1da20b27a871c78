"""A fingerprint is the same on every Python: the tables are generated on
one interpreter and read against installs run by another (serving images
ship 3.12 and later, where `tokenize` splits f-strings into parts)."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dspark.converters import fingerprints
from dspark.converters.fingerprints import definition_hash, hashes_in

# A method whose f-strings nest, carry format specs and sit beside plain and
# raw strings; comments and layout are no part of its fingerprint.
SOURCE = '''class Shown:
    def describe(self, name, width):
        # a comment that changes nothing
        return (f"{name!r:>{width}} is {self.value:.3f}"
                f'{{literal}} {f"nested {name}"}'
                """plain""" + rf"\\d{width}")
'''
# Its fingerprint as the recorded tables were generated (CPython 3.11, where
# an f-string is one STRING token).
RECORDED = "c0ef1d79f05cdc15"


def test_an_f_string_is_one_token_as_the_tables_were_recorded():
    assert definition_hash(SOURCE, ast.parse(SOURCE), "Shown.describe") == RECORDED


def test_an_edited_f_string_is_another_fingerprint():
    edited = SOURCE.replace("{self.value:.3f}", "{self.value:.4f}")
    assert definition_hash(edited, ast.parse(edited), "Shown.describe") != RECORDED


def _other_pythons() -> list[str]:
    """Interpreters on PATH of another minor version than this one (3.12 and
    later tokenize f-strings in parts); those that do not start are left out."""
    found = []
    for minor in range(12, 16):
        name = f"python3.{minor}"
        if minor == sys.version_info.minor or not (path := shutil.which(name)):
            continue
        if subprocess.run([path, "-c", "pass"], capture_output=True).returncode == 0:
            found.append(path)
    return found


# Run by the other interpreter: the module is loaded from its file (it needs
# only the standard library), so dspark's dependencies need not be there.
_PROBE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("fingerprints", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["fingerprints"] = module
spec.loader.exec_module(module)
root, functions = sys.argv[2], json.loads(sys.argv[3])
def read(path):
    try:
        return open(f"{root}/{path}", encoding="utf-8").read()
    except OSError:
        return None
print(json.dumps(module.hashes_in(read, functions)))
"""


@pytest.mark.parametrize("python", _other_pythons() or [pytest.param(None, marks=pytest.mark.skip(
    reason="no CPython 3.12 or later on PATH to read the installs with"))])
@pytest.mark.parametrize("name, version", [("tokenspeed", "0.1.1"), ("vllm", "0.33.0"), ("sglang", "0.5.23")])
def test_a_release_read_by_another_python_is_the_release_recorded(python, name, version, released_engine):
    from dspark.converters.engine_install import recorded_fingerprints

    site = released_engine(name, version)
    recorded = recorded_fingerprints(name)[version]
    done = subprocess.run([python, "-c", _PROBE, fingerprints.__file__, str(site), json.dumps(list(recorded))],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout)
    assert {f: h for f, h in read.items() if h != recorded[f]} == {}
    # and this interpreter reads the same files alike
    here = hashes_in(lambda path: (Path(site) / path).read_text(encoding="utf-8")
                     if (Path(site) / path).exists() else None, recorded)
    assert here == read
