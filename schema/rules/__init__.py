"""The contract rules: a config and a tensor inventory in, findings out.

Nothing here opens a file: callers hand over the parsed config, the
inventory from the readers, and (for `--deep`) payload statistics.
"""

from dspark.schema.families import nested_field
from dspark.schema.rules.config import cross_field_findings, load_config_schema, schema_findings
from dspark.schema.rules.contract import ContractResult, check_contract
from dspark.schema.rules.inventory import inventory_findings
from dspark.schema.rules.layout import ServedLayout, layout_findings
from dspark.schema.rules.payload import NORM_ROLES, payload_findings
from dspark.schema.rules.resolve import ResolvedDraft
from dspark.schema.rules.stream import DEFAULT_STREAM, STREAM_ENV_VAR, STREAMS, stream_findings
from dspark.schema.rules.target import TargetFacts, target_findings

__all__ = [
    "DEFAULT_STREAM",
    "NORM_ROLES",
    "STREAMS",
    "STREAM_ENV_VAR",
    "ContractResult",
    "ResolvedDraft",
    "ServedLayout",
    "TargetFacts",
    "check_contract",
    "cross_field_findings",
    "inventory_findings",
    "layout_findings",
    "load_config_schema",
    "nested_field",
    "payload_findings",
    "schema_findings",
    "stream_findings",
    "target_findings",
]
