"""Every finding code is explained, and tied to engine facts that exist."""

from __future__ import annotations

from dspark.schema.engines import PROFILES
from dspark.schema.explanations import _FACTS, EXPLANATIONS, rule_sources, similar_codes
from dspark.schema.findings import FINDING_CODES


def test_every_code_has_an_explanation_and_no_other():
    assert set(EXPLANATIONS) == set(FINDING_CODES)
    for code, explanation in EXPLANATIONS.items():
        assert explanation.why.endswith(".") and explanation.action.endswith("."), code


def test_every_engine_fact_a_code_names_is_found_on_some_engine():
    """A fact name that no profile holds (a typo, a source key renamed)
    would silently drop the citation."""
    for code, explanation in EXPLANATIONS.items():
        for fact in explanation.engine_facts:
            found = any(fact in loader.sources for engine in PROFILES for loader in engine.loaders.values())
            assert found or fact in _FACTS, (code, fact)
        if explanation.engine_facts:
            assert rule_sources(code, PROFILES), code


def test_similar_codes():
    assert similar_codes("inv03")[0] == "INV003"
    assert similar_codes("zzzzzz") == []


def test_every_code_belongs_to_a_named_group():
    from dspark.schema.explanations import GROUPS

    assert {code[:3] for code in FINDING_CODES} == set(GROUPS)
