"""The lists of routes agree with the routes: the billed routes have one list
(``compactor_aws.routes.common.BILLED_ROUTES``), whose routes answer through ``billed`` and the others not, and
the OpenAPI document gives the ``Idempotency-Key`` header to exactly those (docs/billing.md, docs/api.md); the
README's API table names every route of template.yaml."""

from __future__ import annotations

from types import ModuleType

import pytest

from compactor.http_api import rest_proxy_event
from compactor_aws import openapi
from compactor_aws.routes.common import BILLED_ROUTES
from compactor_cli.lambda_runtime import LocalLambdaContext
from compactor_cli.sam_template import Template

from .conftest import REPO, StubService

BODY = b'{"messages":[],"flow_ir":1,"handles":["cmp_0"]}'
"""A body every POST route validates (the core is stubbed)."""


def template_routes() -> list[tuple[str, str]]:
    properties = Template.load(REPO / "template.yaml").function_properties("CompactFunction")
    return [(event["Properties"]["Method"], event["Properties"]["Path"]) for event in properties["Events"].values()]


def test_a_route_replays_an_idempotency_key_exactly_when_it_is_listed_as_billed(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, stub_service: StubService,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COMPACTOR_JOBS_BUCKET", "jobs-bucket")  # the upload routes would answer 503 without it
    monkeypatch.setattr("compactor_aws.routes.jobs._ready", lambda: ("jobs-bucket", (None, "caller")))
    monkeypatch.setattr("compactor.jobs.create_upload", lambda *args: (201, {"job": "created"}))
    monkeypatch.setattr("compactor.jobs.job_status", lambda *args, **kwargs: (200, {"job": "status"}))
    replaying = set()
    for method, path in template_routes():
        answers = []
        for _ in range(2):
            event = rest_proxy_event(method=method, resource_path=path, query={},
                                     body=BODY if method == "POST" else b"",
                                     headers=[("Content-Type", "application/json"), ("Idempotency-Key", "same-key")])
            answers.append(compact_module.handler(event, lambda_context))
        assert [answer["statusCode"] for answer in answers] in ([200, 200], [201, 201]), (method, path)
        replayed = answers[1]["multiValueHeaders"].get("Idempotent-Replayed")
        if replayed == ["true"]:
            replaying.add((method.lower(), path))
    assert replaying == BILLED_ROUTES
    assert {("post", path) for path in ("/compact", "/expand", "/flows", "/flows/normalize")} <= BILLED_ROUTES


def test_the_document_gives_the_idempotency_key_to_the_billed_routes_only(compact_module: ModuleType) -> None:
    keyed = {(method, path) for path, operations in openapi.document(compact_module.app)["paths"].items()
             for method, operation in operations.items()
             if any(parameter["name"] == "Idempotency-Key" for parameter in operation.get("parameters", []))}
    assert keyed == BILLED_ROUTES


def test_the_readmes_api_table_lists_every_route() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## The API"):readme.index("### Worked examples")]
    missing = [(method, path) for method, path in template_routes() if f"| `{method} /v1{path}` |" not in table]
    assert missing == []


def test_the_route_table_is_the_templates(compact_module: ModuleType) -> None:
    """One declared table of the API's routes (``compactor_aws.routes.common.ROUTES``) registers the Powertools
    routes and answers ``Allow``: it holds exactly the routes API Gateway sends to the function."""
    from compactor_aws.routes.common import ROUTES

    declared = {(method, path.replace("<job_id>", "{id}")) for path, methods in ROUTES.items() for method in methods}
    assert declared == set(template_routes())


def test_allow_is_answered_from_the_projects_table_not_powertools_internals(
    compact_module: ModuleType, lambda_context: LocalLambdaContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Allow`` read Powertools' private route tables (``_static_routes``, ``_dynamic_routes``): a Powertools
    release that renames or reshapes them turned every 405 into a 404 and every ``HEAD`` into a 404. Here the
    resolver's tables are emptied (as a renamed attribute would leave nothing to read): no route resolves, and the
    answers of a path the API has are still 405 with its ``Allow``."""
    app = compact_module.app
    monkeypatch.setattr(app, "_static_routes", [])
    monkeypatch.setattr(app, "_dynamic_routes", [])
    for path, allow in (("/compact", "OPTIONS, POST"), ("/jobs/job-1", "GET, HEAD, OPTIONS"),
                        ("/v1/healthz", "GET, HEAD, OPTIONS")):
        event = rest_proxy_event(method="PUT", resource_path=path, query={}, body=b"", headers=[])
        response = compact_module.handler(event, lambda_context)
        assert (response["statusCode"], response["multiValueHeaders"].get("Allow")) == (405, [allow]), path
    unknown = compact_module.handler(rest_proxy_event(method="PUT", resource_path="/jobs", query={}, body=b"",
                                                      headers=[]), lambda_context)
    assert unknown["statusCode"] == 404
