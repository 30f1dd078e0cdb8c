"""The layer keeps botocore's data only for the AWS services it calls (layers/compactor/Makefile,
docs/performance.md#botocore-data): every client the layer's code or its dependencies create must find
its service there."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import botocore
import botocore.session
from botocore.utils import EVENT_ALIASES
from hypothesis import given, settings
from hypothesis import strategies as st
import pytest
from botocore.exceptions import UnknownServiceError
from botocore.loaders import Loader
from botocore.model import ServiceModel
from botocore.regions import EndpointResolver

REPO = Path(__file__).resolve().parents[2]
LAYER = REPO / "layers" / "compactor"
CLIENT_CALL = re.compile(r"""client\(\s*["']([a-z0-9-]+)["']""")
# The dependency modules the layer uses that create AWS clients of their own.
DEPENDENCY_CLIENTS = ("aws_lambda_powertools.utilities.idempotency.persistence.dynamodb",
                      "aws_lambda_powertools.utilities.parameters.secrets",
                      "aws_xray_sdk.core.sampling.connector")


def kept_services() -> set[str]:
    match = re.search(r"^BOTOCORE_SERVICES := (.+)$", (LAYER / "Makefile").read_text(), re.MULTILINE)
    assert match, "the layer's Makefile names the botocore services it keeps"
    return set(match.group(1).split())


def kept_operations() -> dict[str, set[str]]:
    """``BOTOCORE_OPERATIONS`` of the layer's Makefile: the operations kept of the services it names."""
    match = re.search(r"^BOTOCORE_OPERATIONS := ((?:.*\\\n)*.*)$", (LAYER / "Makefile").read_text(), re.MULTILINE)
    assert match, "the layer's Makefile names the operations it keeps"
    pairs = (item.partition("=") for item in match.group(1).replace("\\\n", " ").split())
    return {service: set(names.split(",")) for service, _, names in pairs}


def called_services() -> set[str]:
    sources = [*LAYER.rglob("*.py"), *(REPO / "functions").rglob("*.py")]
    for module in DEPENDENCY_CLIENTS:
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin, module
        sources.append(Path(spec.origin))
    return {name for path in sources for name in CLIENT_CALL.findall(path.read_text(encoding="utf-8"))}


def test_every_service_a_client_is_created_for_is_kept() -> None:
    called = called_services()
    assert {"s3", "dynamodb", "stepfunctions", "bedrock-runtime", "secretsmanager", "xray"} <= called
    assert called <= kept_services()


# Where an operation may be called from: the layer, the handlers, and the packages that make calls of their
# own on the layer's clients (botocore's redirects and S3 Express sessions, boto3's and s3transfer's
# injected S3 methods, the Powertools utilities).
CALLERS = ("botocore", "boto3", "s3transfer", "aws_lambda_powertools")


def test_every_operation_the_code_calls_or_names_is_kept() -> None:
    """An operation left out of a trimmed model is a method its client lacks: every call ``.op(`` and
    every name of an operation in a string (presigned URLs, paginators, botocore's own handlers) found
    in the code that runs in the layer must be kept."""
    from botocore import xform_name

    sources = [*LAYER.rglob("*.py"), *(REPO / "functions").rglob("*.py")]
    for package in CALLERS:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.origin, package
        sources += Path(spec.origin).parent.rglob("*.py")
    text = "\n".join(path.read_text(encoding="utf-8", errors="replace") for path in sources)
    kept = kept_operations()
    assert set(kept) == {"s3", "dynamodb"} and set(kept) <= kept_services()
    for service, operations in kept.items():
        model = Loader().load_service_model(service, "service-2")
        assert operations <= set(model["operations"])
        used = {name for name in model["operations"]
                if re.search(rf"""\.{xform_name(name)}\(|["']({xform_name(name)}|{name})["']""", text)}
        assert used - operations == set(), f"{service}: operations called but not kept"
    assert {"GetObject", "PutObject", "HeadObject", "UploadPart", "HeadBucket", "CreateSession"} <= kept["s3"]
    assert {"PutItem", "GetItem", "UpdateItem", "DeleteItem", "Query", "Scan", "TransactWriteItems"} <= kept["dynamodb"]


@pytest.fixture(scope="module")
def trimmed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The installed botocore's data, trimmed by the layer's own recipe."""
    root = tmp_path_factory.mktemp("layer")
    data = root / "python" / "botocore" / "data"
    shutil.copytree(Path(botocore.__file__).parent / "data", data)
    subprocess.run(["make", "-s", "-C", str(LAYER), "botocore-data", f"ARTIFACTS_DIR={root}",
                    f"PYTHON={sys.executable}"], check=True)
    return data


def test_the_trimmed_data_builds_a_client_for_each_kept_service_and_no_other(trimmed: Path) -> None:
    loader = Loader(extra_search_paths=[str(trimmed)], include_default_search_paths=False)
    assert set(loader.list_available_services("service-2")) == kept_services()
    session = botocore.session.Session()
    session.register_component("data_loader", loader)
    for service in kept_services():
        client = session.create_client(service, region_name="eu-west-3", aws_access_key_id="k",
                                       aws_secret_access_key="s")
        assert client.meta.service_model.service_name == service
    with pytest.raises(UnknownServiceError):
        session.create_client("sqs", region_name="eu-west-3", aws_access_key_id="k", aws_secret_access_key="s")


def outcome(call: Any, *args: Any, **kwargs: Any) -> Any:
    """What botocore answers, or the error it raises (the same error on both sides is the same answer)."""
    try:
        return call(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__, str(exc)


def test_the_trimmed_endpoints_resolve_every_kept_service_as_the_full_ones(trimmed: Path) -> None:
    full_loader = Loader()
    trimmed_loader = Loader(extra_search_paths=[str(trimmed)], include_default_search_paths=False)
    full = EndpointResolver(full_loader.load_data("endpoints"))
    short = EndpointResolver(trimmed_loader.load_data("endpoints"))
    assert (trimmed / "endpoints.json").stat().st_size < (Path(botocore.__file__).parent / "data" / "endpoints.json").stat().st_size / 10
    prefixes = {full_loader.load_service_model(name, "service-2")["metadata"]["endpointPrefix"]
                for name in kept_services()}
    regions = {region for partition in full_loader.load_data("endpoints")["partitions"] for region in partition["regions"]}
    regions |= {"us-iso-west-9", "eu-central-3", "aws-global"}  # unknown regions fall back the same way
    checked = 0
    for prefix in prefixes:
        assert short.get_available_endpoints(prefix) == full.get_available_endpoints(prefix)
        for region in sorted(regions | set(full.get_available_endpoints(prefix))):
            for fips in (False, True):
                for dualstack in (False, True):
                    options = {"use_fips_endpoint": fips, "use_dualstack_endpoint": dualstack}
                    assert outcome(short.construct_endpoint, prefix, region, **options) == \
                        outcome(full.construct_endpoint, prefix, region, **options)
                    checked += 1
    assert checked > 7 * 30 * 4
    assert short.get_available_partitions() == full.get_available_partitions()
    assert all(outcome(short.get_partition_for_region, region) == outcome(full.get_partition_for_region, region)
               for region in regions)


def test_the_trimmed_models_are_the_full_ones_with_their_documentation_emptied_and_the_rule_sets_equal(trimmed: Path) -> None:
    full_loader = Loader()
    trimmed_loader = Loader(extra_search_paths=[str(trimmed)], include_default_search_paths=False)
    operations = kept_operations()
    for service in kept_services():
        full, short = (loader.load_service_model(service, "service-2") for loader in (full_loader, trimmed_loader))
        if service in operations:  # only the kept operations, each as it was, with every shape it reaches
            assert set(short["operations"]) == operations[service] and short["shapes"].keys() < full["shapes"].keys()
            full = {**full, "operations": {name: full["operations"][name] for name in operations[service]},
                    "shapes": {name: full["shapes"][name] for name in short["shapes"]}}
            reach_every_shape(ServiceModel(short, service_name=service))
        assert short == without_documentation(full) and short != full
        rules = [loader.load_service_model(service, "endpoint-rule-set-1") for loader in (full_loader, trimmed_loader)]
        assert rules[1] == rules[0]
        assert not list(trimmed.glob(f"{service}/*/*.gz")), "kept as compact plain JSON"


def reach_every_shape(model: ServiceModel) -> None:
    """Resolve every shape each operation's input, output and errors reach (botocore raises for a
    shape the model lacks)."""
    seen: set[str] = set()

    def walk(shape: Any) -> None:
        if shape is None or shape.name in seen:
            return
        seen.add(shape.name)
        for member in getattr(shape, "members", {}).values():
            walk(member)
        for attribute in ("member", "key", "value"):
            walk(getattr(shape, attribute, None))

    for name in model.operation_names:
        operation = model.operation_model(name)
        for shape in (operation.input_shape, operation.output_shape, *operation.error_shapes):
            walk(shape)
    assert seen


def without_documentation(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "" if k in ("documentation", "documentationUrl") else without_documentation(v)
                for k, v in value.items()}
    return [without_documentation(v) for v in value] if isinstance(value, list) else value


def ordered(value: Any) -> Any:
    """``value`` with every mapping as a list of its items, in order (so that order counts in ``==``)."""
    if isinstance(value, dict):
        return [(key, ordered(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [ordered(item) for item in value]
    return value


def test_the_sessions_loader_reads_every_data_file_as_botocores_own(trimmed: Path) -> None:
    """``compactor_aws.aws_session``'s plain JSON loader: every file of the layer's data, and the full data's
    compressed files of the services kept, load equal and in the same order as botocore's loader reads them."""
    from botocore.loaders import JSONFileLoader

    from compactor_aws.aws_session import PlainJSONFileLoader

    full = Path(botocore.__file__).parent / "data"
    compressed = (path for service in kept_services() for path in (full / service).rglob("*.gz"))
    paths = [*trimmed.rglob("*.json"), *compressed]
    assert len(paths) > 40 and any(path.suffix == ".gz" for path in paths)
    for path in paths:
        stem = str(path).removesuffix(".gz").removesuffix(".json")
        plain, own = PlainJSONFileLoader().load_file(stem), JSONFileLoader().load_file(stem)
        assert own is not None and ordered(plain) == ordered(own), path
    assert PlainJSONFileLoader().load_file(str(trimmed / "no-such-file")) is None
    # and the override is what reads them (botocore's own loader gives OrderedDicts): were ``_load_file``
    # no longer called, the comparison above would still hold
    assert type(PlainJSONFileLoader().load_file(stem)) is dict and type(own) is not dict


def test_the_container_session_builds_its_clients_with_the_plain_loader() -> None:
    from compactor_aws import aws_session

    session = aws_session.new_session()
    assert isinstance(session._session.get_component("data_loader").file_loader, aws_session.PlainJSONFileLoader)
    client = session.client("s3", region_name="eu-west-3", aws_access_key_id="k", aws_secret_access_key="s")
    assert client.meta.service_model.operation_model("PutObject").name == "PutObject"


def _handler_table(core: Any) -> tuple[Any, Any]:
    """Every event's registered handlers (first, middle, last, in order) and the unique ids of a session."""
    emitter = core._events._emitter
    table: dict[str, tuple[list[Any], ...]] = {}

    def walk(node: dict[str, Any], path: tuple[str, ...]) -> None:
        if node.get("values") is not None:
            table[".".join(path)] = tuple(list(part) for part in node["values"])
        for chunk, child in node["children"].items():
            walk(child, (*path, chunk))

    walk(emitter._handlers._root, ())
    return table, emitter._unique_id_handlers


def _same_code(table: dict[str, tuple[list[Any], ...]]) -> dict[str, tuple[list[Any], ...]]:
    """The table with each plain function taken by its code: an initializer's closure (Powertools' user-agent
    hook makes one per session) is the same handler in every session."""
    return {event: tuple([getattr(handler, "__code__", handler) for handler in part] for part in parts)
            for event, parts in table.items()}


def _other_service(event: str) -> bool:
    """Whether a handler table's event is another service's than the layer's (``aws_session.SERVICE_IDS``)."""
    from compactor_aws import aws_session

    service = aws_session.handler_service(event)
    return service is not None and service not in {*aws_session.SERVICE_IDS.values(),
                                                   *aws_session.CREDENTIAL_SERVICES}


def _layers(table: dict[str, Any]) -> dict[str, Any]:
    return {event: parts for event, parts in table.items() if not _other_service(event)}


def test_the_container_session_registers_botocores_handlers_as_a_stock_session_does() -> None:
    """``new_core_session`` skips the ``inspect`` check of botocore's own handlers and the alias lookup of
    names holding no alias, and leaves out the handlers of services the layer does not call: the handler
    tables (aliased names included) equal a stock session's but for those services' events, which are all
    it lacks; a handler of anyone else is still checked, and a name registered later is still aliased."""
    import botocore.handlers
    import botocore.session

    from compactor_aws import aws_session

    def initializer(session: Any) -> None:  # as Powertools' user-agent hook: after the built-in handlers
        session.register("request-created", lambda **kwargs: None)

    botocore.register_initializer(initializer)
    try:
        ours, stock = aws_session.new_core_session(), botocore.session.get_session()
    finally:
        botocore.unregister_initializer(initializer)
    table, unique = _handler_table(ours)
    stock_table = _handler_table(stock)[0]
    assert (_same_code(_layers(table)), unique) == (_same_code(_layers(stock_table)), _handler_table(stock)[1])
    dropped = {event for event, parts in stock_table.items() if any(parts)} - {
        event for event, parts in table.items() if any(parts)}
    assert len(dropped) > 30 and all(map(_other_service, dropped))
    assert {"before-call.glacier", "creating-client-class.rds", "docs.*.glacier.*.complete-section",
            "before-call.api-gateway"} <= dropped and not any(map(_other_service, _layers(table)))
    assert len(table) > 30 and "before-call.s3" in table and "choose-signer.sts.AssumeRoleWithSAML" in table
    assert table["request-created"][1][-1].__code__ is stock._events._emitter._handlers._root[
        "children"]["request-created"]["values"][1][-1].__code__  # the initializer's handler comes last
    assert isinstance(aws_session.new_session()._session._events._emitter, aws_session.BuiltinTrustingEmitter)
    for spec in botocore.handlers.BUILTIN_HANDLERS:  # what the skipped check would have said
        assert botocore.compat.accepts_kwargs(spec[1]), spec

    def no_kwargs(request: Any) -> None:
        pass

    with pytest.raises(ValueError, match="must accept keyword"):
        ours.register("before-call.s3", no_kwargs)
    ours.register("before-call.apigateway.GetRestApi", lambda **kwargs: None)
    assert "before-call.api-gateway.GetRestApi" in _handler_table(ours)[0]
    client = aws_session.new_session().client("s3", region_name="eu-west-3", aws_access_key_id="k",
                                              aws_secret_access_key="s")
    assert client.meta.events._emitter.__class__ is aws_session.BuiltinTrustingEmitter
    assert client.meta.events.__class__ is aws_session.QuickAliaser  # what a client emits is aliased by it too


_ALIAS_PARTS = sorted({part for old in EVENT_ALIASES for part in (old, *old.split("."))}
                      | {new for new in EVENT_ALIASES.values()})


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_ALIAS_PARTS), st.sampled_from(["before-call", "*", "s3", "GetObject"]),
                          st.text(alphabet="abcdeilmnorstu-.*", max_size=12)), min_size=1, max_size=6))
def test_the_quick_aliaser_names_every_event_as_botocores(parts: list[str]) -> None:
    """Any event name, built from the aliases (dotted ones whole and in pieces), their new names and other
    words: the quick aliaser answers what botocore's answers."""
    import botocore.hooks

    from compactor_aws import aws_session

    name = ".".join(parts)
    for candidate in (name, name.upper(), f"{name}.suffix", f"prefix.{name}"):
        ours = aws_session.QuickAliaser(botocore.hooks.HierarchicalEmitter())
        assert ours._alias_event_name(candidate) == botocore.hooks.EventAliaser(
            botocore.hooks.HierarchicalEmitter())._alias_event_name(candidate), candidate


def test_a_client_of_each_kept_service_gets_the_handlers_of_a_stock_sessions_client() -> None:
    """What the left-out handlers change for a client of the layer (``aws_session.SERVICE_IDS``, every service
    of ``BOTOCORE_SERVICES``): nothing. Each client the container session builds has, event by event and in
    order, the handlers a client of a stock boto3 session has, less other services' events (which it never
    emits); a client of any other service is refused; and the session's loader searches no resource
    definitions (boto3's data: the layer builds no resources)."""
    import boto3

    from compactor_aws import aws_session

    assert set(aws_session.SERVICE_IDS) == kept_services()
    ours, stock = aws_session.new_session(), boto3.Session()
    assert aws_session.BOTO3_DATA in stock._loader.search_paths
    assert aws_session.BOTO3_DATA not in ours._loader.search_paths and ours.get_available_resources() == []
    assert [path for path in stock._loader.search_paths if path != aws_session.BOTO3_DATA] == \
        ours._loader.search_paths
    options = {"region_name": "eu-west-3", "aws_access_key_id": "k", "aws_secret_access_key": "s"}
    for service, service_id in aws_session.SERVICE_IDS.items():
        client, reference = ours.client(service, **options), stock.client(service, **options)
        assert client.meta.service_model.service_id.hyphenize() == service_id
        table, reference_table = (_handler_table(SimpleNamespace(_events=built.meta.events))[0]
                                  for built in (client, reference))
        assert _same_code(_layers(table)) == _same_code(_layers(reference_table)), service
        assert any(event.split(".")[1:2] == [service_id] and any(parts) for event, parts in table.items()), service
    for path in [*LAYER.rglob("*.py"), *(REPO / "functions").rglob("*.py")]:
        assert ".resource(" not in path.read_text(encoding="utf-8"), path
    with pytest.raises(ValueError, match="not a service of the layer"):
        aws_session.client("sqs")


def test_clients_botocores_credential_providers_build_get_the_handlers_of_a_stock_sessions_client() -> None:
    """botocore's credential and token providers build clients through the session itself, not through
    ``aws_session.client`` (an ``aws login`` profile's ``signin``, an SSO profile's ``sso``/``sso-oidc``, an
    assumed role's ``sts``, ...): each such client of the container session has a stock client's handlers
    (without them a ``signin`` client lacks ``create_o_auth2_token`` and the profile's refresh fails)."""
    import boto3

    from compactor_aws import aws_session

    ours, stock = aws_session.new_session()._session, boto3.Session()._session
    options = {"region_name": "eu-west-3", "aws_access_key_id": "k", "aws_secret_access_key": "s"}
    for service in ("signin", "sso", "sso-oidc", "sts", "cognito-identity"):
        client, reference = ours.create_client(service, **options), stock.create_client(service, **options)
        service_id = client.meta.service_model.service_id.hyphenize()
        assert service_id in aws_session.CREDENTIAL_SERVICES, service
        table, reference_table = (_handler_table(SimpleNamespace(_events=built.meta.events))[0]
                                  for built in (client, reference))
        assert _same_code(_layers(table)) == _same_code(_layers(reference_table)), service
        assert any(event.split(".")[1:2] == [service_id] and any(parts) for event, parts in table.items()), service
    assert hasattr(ours.create_client("signin", **options), "create_o_auth2_token")


def test_an_unhashable_handler_is_checked_and_registered_as_by_a_stock_session() -> None:
    """The built-in handlers' check is skipped by membership; a callable that cannot be hashed is no
    built-in handler and is checked and registered as botocore does."""
    import botocore.session

    from compactor_aws import aws_session

    class Handler:
        __hash__ = None  # type: ignore[assignment]

        def __eq__(self, other: object) -> bool:
            return self is other

        def __call__(self, **kwargs: Any) -> None:
            pass

    for session in (aws_session.new_core_session(), botocore.session.get_session()):
        session.register("before-call.s3", Handler())

        def positional(request: Any) -> None:
            pass

        with pytest.raises(ValueError, match="must accept keyword"):
            session.register("before-call.s3", positional)


def _credentials(core: Any) -> tuple[Any, ...]:
    found = core.get_credentials()
    return (None,) if found is None else (found.access_key, found.secret_key, found.token, found.method)


def test_the_container_session_resolves_the_credentials_a_stock_session_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment's credentials answer before botocore's chain is built (its metadata services' HTTP
    sessions cost 1.8 ms); without them, or with a profile named for the session, the chain answers as in a
    stock session, and the chain a caller asks for is botocore's."""
    import botocore.session

    from compactor_aws import aws_session

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                 "AWS_CREDENTIAL_EXPIRATION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "credentials").write_text("[default]\naws_access_key_id = FILE\naws_secret_access_key = file\n"
                                          "[named]\naws_access_key_id = NAMED\naws_secret_access_key = named\n")
    (tmp_path / "config").write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def both() -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        return _credentials(aws_session.new_core_session()), _credentials(botocore.session.get_session())

    assert both() == (("FILE", "file", None, "shared-credentials-file"),) * 2  # no environment credentials
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    assert both() == (("ENV", "env", "token", "env"),) * 2
    ours = aws_session.new_core_session()
    resolver = ours.get_component("credential_provider")
    assert _credentials(ours)[0] == "ENV" and resolver._providers is None  # the chain was never built
    methods = [provider.METHOD for provider in botocore.session.get_session().get_component("credential_provider").providers]
    assert [provider.METHOD for provider in resolver.providers] == methods and methods[0] == "env"
    resolver.remove("env")  # a chain changed by its caller is the one that answers
    assert _credentials(ours)[0] == "ENV" and resolver.load_credentials().access_key == "FILE"
    monkeypatch.setenv("AWS_PROFILE", "named")  # a profile in the environment: the environment's keys still win
    assert both() == (("ENV", "env", "token", "env"),) * 2
    monkeypatch.delenv("AWS_PROFILE")
    named = aws_session.CoreSession(profile="named"), botocore.session.Session(profile="named")
    assert _credentials(named[0]) == _credentials(named[1]) == ("NAMED", "named", None, "shared-credentials-file")


def test_clients_are_built_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A boto3 session is not thread-safe, and a client may be built first on a worker thread: every build
    holds the module's lock."""
    from compactor_aws import aws_session

    class Session:
        def client(self, service: str, **kwargs: Any) -> tuple[str, bool]:
            return service, aws_session._BUILDING.locked()

    monkeypatch.setattr(aws_session.SESSION, "get", lambda: Session())
    assert aws_session.client("s3") == ("s3", True)


def test_the_s3_store_works_on_a_client_of_the_trimmed_data(trimmed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import mock_aws

    from compactor_aws import s3_store
    from compactor_aws.aws_session import PlainJSONFileLoader

    monkeypatch.setattr(s3_store, "PART_BYTES", 5 * 1024 * 1024)  # S3's smallest part: two parts below
    session = botocore.session.Session()
    session.register_component("data_loader", Loader(extra_search_paths=[str(trimmed)],
                                                      file_loader=PlainJSONFileLoader(),
                                                      include_default_search_paths=False))
    with mock_aws():
        client = session.create_client("s3", region_name="eu-west-3", aws_access_key_id="k",
                                       aws_secret_access_key="s")
        client.create_bucket(Bucket="bucket", CreateBucketConfiguration={"LocationConstraint": "eu-west-3"})
        store = s3_store.S3Store(client)
        store.put("bucket", "k", b"{}", content_type="application/json", metadata={"Source-Etag": "e"})
        head = store.head("bucket", "k")
        assert head is not None and head.metadata == {"source-etag": "e"} and store.head("bucket", "missing") is None
        assert store.get("bucket", "k", version_id=None, max_bytes=10).body == b"{}"
        assert not store.put_if("bucket", "k", b"[]", content_type="application/json", metadata={}, replacing=None)
        assert store.put_if("bucket", "k", b"[]", content_type="application/json", metadata={}, replacing=head.etag)
        with store.open_writer("bucket", "big", content_type="text/plain", metadata={}) as writer:
            writer.write("x" * (6 * 1024 * 1024))
        with store.open("bucket", "big") as body:
            assert len(body.read()) == 6 * 1024 * 1024
        calls = {"stepfunctions": ("list_state_machines", "stateMachines"),
                 "secretsmanager": ("list_secrets", "SecretList"), "sts": ("get_caller_identity", "Account"),
                 "xray": ("get_trace_summaries", "TraceSummaries")}
        for service, (operation, key) in calls.items():  # one request each (moto has no Bedrock Runtime)
            other = session.create_client(service, region_name="eu-west-3", aws_access_key_id="k",
                                          aws_secret_access_key="s")
            kwargs = {"StartTime": 0, "EndTime": 1} if service == "xray" else {}
            assert key in getattr(other, operation)(**kwargs)
        dynamodb = session.create_client("dynamodb", region_name="eu-west-3", aws_access_key_id="k",
                                         aws_secret_access_key="s")
        dynamodb.create_table(TableName="t", KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                              AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
                              BillingMode="PAY_PER_REQUEST")
        dynamodb.put_item(TableName="t", Item={"id": {"S": "a"}}, ConditionExpression="attribute_not_exists(id)")
        dynamodb.update_item(TableName="t", Key={"id": {"S": "a"}}, UpdateExpression="SET n = :n",
                             ExpressionAttributeValues={":n": {"N": "1"}})
        assert dynamodb.get_item(TableName="t", Key={"id": {"S": "a"}})["Item"]["n"] == {"N": "1"}
        pages = dynamodb.get_paginator("query").paginate(TableName="t", KeyConditionExpression="id = :a",
                                                         ExpressionAttributeValues={":a": {"S": "a"}})
        assert [item["id"]["S"] for page in pages for item in page["Items"]] == ["a"]
        dynamodb.delete_item(TableName="t", Key={"id": {"S": "a"}})
        assert not hasattr(dynamodb, "list_tables") and not hasattr(client, "list_object_versions")


def test_the_recipe_refuses_a_service_botocore_does_not_know(tmp_path: Path) -> None:
    (tmp_path / "python" / "botocore" / "data" / "s3").mkdir(parents=True)
    done = subprocess.run(["make", "-s", "-C", str(LAYER), "botocore-data", f"ARTIFACTS_DIR={tmp_path}",
                           f"PYTHON={sys.executable}", "BOTOCORE_SERVICES=s3 no-such-service"],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "no-such-service" in done.stderr
