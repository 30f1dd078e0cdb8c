"""The billing record's and ledger's documented values are the ones the code writes: every metered route and
every mode a call record can carry (docs/billing.md, docs/deploy.md)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from compactor.call_record import FLOW_MODE, NO_MODE
from compactor.compaction.modes import names
from compactor.object_jobs import ROUTE as S3_ROUTE

DOCS = Path(__file__).resolve().parents[2] / "docs"
ROUTES = ("compact", "expand", "flows", "flows_normalize", S3_ROUTE)
"""The ``route`` of the billed routes (``compactor_aws.routes``: their ``billed`` calls) and of the S3 path."""


def test_the_routes_billed_through_the_api_are_the_documented_ones(compact_module: ModuleType) -> None:
    from compactor_aws.routes.common import BILLED_ROUTES  # filled as the handler includes its routes

    assert {path.strip("/").replace("/", "_") for _, path in BILLED_ROUTES} == set(ROUTES) - {S3_ROUTE}


def test_the_ledger_and_the_billing_record_document_every_route_and_mode() -> None:
    billing, deploy = ((DOCS / name).read_text(encoding="utf-8") for name in ("billing.md", "deploy.md"))
    ledger_row = next(line for line in billing.splitlines() if line.startswith("| `route`, `mode` |"))
    record = deploy[deploy.index("**Billing record**"):deploy.index("**Metrics**")]
    metrics = deploy[deploy.index("**Metrics**"):]
    modes = [*names(), FLOW_MODE, NO_MODE]
    for route in ROUTES:
        assert f"`{route}`" in ledger_row and f"`{route}`" in metrics, route
        if route != S3_ROUTE:
            assert f"`/v1/{route.replace('_', '/')}`" in record, route
    for mode in modes:
        assert f"`{mode}`" in ledger_row and f"`{mode}`" in record, mode
