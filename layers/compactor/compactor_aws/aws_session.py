"""The container's boto3 session, from which every AWS client of the layer is built
(docs/performance.md#botocore-data).

One session per container: a botocore session registers its ~130 event handlers when it is created, and
its loader keeps every model it has read, so the S3 and DynamoDB clients (and a client rebuilt after a
SnapStart restore) share both. Clients are thread-safe; the session is not, so :func:`client` builds one
client at a time under a lock (a client may be built first on a worker thread, e.g. the fan-out runner's).

botocore parses its data files with ``json.loads(..., object_pairs_hook=OrderedDict)``: about twice the
CPU of plain ``json.loads`` for the S3 model and rule set (2.6 ms each on a cold start against 1.1).
Plain dicts keep the order of the file as well, and botocore builds its own ordered mappings from what it
loads, so the session's loader reads the same files with plain ``json.loads``;
``tests/unit/test_layer_botocore.py`` holds that every data file of the layer loads equal, in the same
order, to what botocore's own loader reads.

A botocore session registers its ~135 built-in handlers one by one, and each registration checks the handler
with ``inspect`` (it must take ``**kwargs``) and looks for old service names in the event's name (65 aliases,
the name split again for each): 3 of the session's 5 ms of CPU; and each client looks up every event name it
emits the first time the same way (60 more names in a client's construction and first request, 1.4 ms).
:func:`new_session` registers the same handlers in the same order through the same methods, with the check
skipped for botocore's own handlers (each takes ``**kwargs``), and its aliaser (:class:`QuickAliaser`,
copied into every client) first asks whether a name contains any of the aliases as a substring: when none
does, botocore's lookup leaves the name as it is. ``tests/unit/test_layer_botocore.py`` holds the handler
tables equal to a stock session's (but for the services left out, below) and the aliaser's names equal to
botocore's.

Of botocore's built-in handlers, those of 64 event names belong to services neither the layer nor botocore's
credential providers call (RDS, EC2, Glacier, ...), whose events only those services' clients emit: the
session leaves them out (:data:`SERVICE_IDS`, :data:`CREDENTIAL_SERVICES`, :func:`builtin_handlers`; 2.1 ->
1.0 ms of CPU, and each client copies fewer), and :func:`client` builds clients of the layer's services only. boto3 adds its own data directory to the loader's search
paths, which holds resource definitions only (the layer builds clients, never resources); each client's
first load lists it for nothing (about 0.5 ms for the first two clients), so the session's loader leaves it
out. The test holds that a client of each kept service has exactly the handlers, in order, of a stock
session's client, less other services' events.

A session's first client resolves its credentials through botocore's chain, whose first link reads them from
the environment (where Lambda puts them); building the whole chain makes two HTTP sessions, with their TLS
contexts, for the container and instance metadata services: 1.8 ms of CPU for nothing when the environment
holds the credentials. :class:`EnvFirstCredentialResolver` asks that first link before it builds the rest.
One difference follows, and is accepted: building the chain also reads and checks the metadata services'
settings (``AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE``, ``AWS_METADATA_SERVICE_TIMEOUT``, ...), so with the
credentials in the environment an invalid value there no longer raises; nothing would have read it.

Every new HTTPS connection of a botocore client loads its CA bundle into the client's SSL context: botocore sets
the connection pool's ``ca_certs`` to ``get_cert_path(verify)`` (certifi's ``cacert.pem``, 117 certificates) and
urllib3 calls ``load_verify_locations(ca_certs, ca_cert_dir)`` for each connection it opens: 23-70 ms of CPU each,
paid by a first request once to three times, and again after every SnapStart restore
(docs/performance.md#the-ca-bundle-read-by-hash-fifteenth-round-issue-11). The layer ships the same bundle as an
OpenSSL hashed directory (:mod:`compactor.ca_directory`), whose load costs about 1.5 ms: OpenSSL reads only the
issuers a chain needs. :func:`client` gives a client's HTTP session (its ``_endpoint.http_session``: botocore
offers no public way to choose it) the class :class:`HashedCASession`, which sets the pool's ``ca_cert_dir`` to
that directory instead of ``ca_certs`` to the file, when, and only when, the client's ``verify`` resolves to the
very file the directory was built from and that file still holds the manifest's bytes (checked once per container
and path, by the first client, which the before-snapshot hook builds). Any other case keeps botocore's own load:
``verify=False`` (nothing loaded), ``AWS_CA_BUNDLE`` or ``verify=<path>`` naming another file (even a copy), a
bundle changed since the build, no directory (a checkout, or a build without ``openssl``). Nothing else of the
connection changes: urllib3 still sets ``CERT_REQUIRED`` and checks the host name, on the same context. Only the
clients :func:`client` builds are affected, not botocore process-wide (botocore's own credential clients, other
sessions). ``tests/unit/aws/test_hashed_ca.py`` holds all of this against a local TLS server.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import functools

import boto3
import botocore.credentials
import botocore.handlers
import botocore.hooks
import botocore.httpsession
import botocore.loaders
import botocore.session

from compactor import ca_directory
from compactor.container import PerContainer


class PlainJSONFileLoader(botocore.loaders.JSONFileLoader):
    """botocore's JSON file loader without the ``OrderedDict`` hook (see the module docstring)."""

    def _load_file(self, full_path: str, open_method: Any) -> Any:
        if not os.path.isfile(full_path):
            return None
        with open_method(full_path, "rb") as fp:
            return json.loads(fp.read().decode("utf-8"))


_BUILTIN_HANDLERS = frozenset(spec[1] for spec in botocore.handlers.BUILTIN_HANDLERS)

SERVICE_IDS: dict[str, str] = {"s3": "s3", "dynamodb": "dynamodb", "stepfunctions": "sfn",
                               "bedrock-runtime": "bedrock-runtime", "secretsmanager": "secrets-manager",
                               "xray": "xray", "sts": "sts"}
"""The services whose botocore data the layer ships (``BOTOCORE_SERVICES`` in layers/compactor/Makefile),
each with the name its events carry (botocore's hyphenized service id)."""

CREDENTIAL_SERVICES = frozenset({"sts", "sso", "sso-oidc", "signin", "cognito-identity"})
"""The services botocore's own credential and token providers build clients of (through the session, not
:func:`client`: an ``aws login`` profile's ``signin``, an SSO profile's ``sso`` and ``sso-oidc``, ...), by the
name their events carry: their built-in handlers are kept too, so that those clients are botocore's (a
developer's profile on the CLI; Lambda's credentials come from the environment)."""


def handler_service(event_name: str) -> str | None:
    """The service whose events a built-in handler's event name is for (``before-call.s3.PutObject``:
    ``s3``; ``docs.*.s3.CopyObject.complete-section``: ``s3``); None for every service."""
    parts = event_name.split(".")
    index = 2 if parts[0] == "docs" else 1
    service = parts[index] if index < len(parts) else "*"
    return None if service == "*" else service


def builtin_handlers() -> list[tuple[Any, ...]]:
    """botocore's built-in handlers (``botocore.handlers.BUILTIN_HANDLERS``, in order) but those of
    services neither the layer nor botocore's credential providers call."""
    kept = set(SERVICE_IDS.values()) | CREDENTIAL_SERVICES
    return [spec for spec in botocore.handlers.BUILTIN_HANDLERS
            if (service := handler_service(spec[0])) is None or service in kept]


class BuiltinTrustingEmitter(botocore.hooks.HierarchicalEmitter):
    """botocore's event emitter, without the ``inspect`` check of botocore's own built-in handlers (see the
    module docstring); any other handler is checked as botocore checks it."""

    def _verify_accept_kwargs(self, func: Any) -> None:
        try:
            builtin = func in _BUILTIN_HANDLERS
        except TypeError:  # an unhashable callable is no built-in handler: botocore checks it
            builtin = False
        if not builtin:
            super()._verify_accept_kwargs(func)


class QuickAliaser(botocore.hooks.EventAliaser):
    """botocore's event aliaser, which leaves a name holding none of the aliases as it is without looking
    for each alias in its parts (see the module docstring)."""

    def _alias_event_name(self, event_name: str) -> str:
        known = self._alias_name_cache
        if event_name not in known and not any(map(event_name.__contains__, self._event_aliases)):
            known[event_name] = event_name  # what botocore's lookup answers for a name holding no alias
        return super()._alias_event_name(event_name)


class CoreSession(botocore.session.Session):
    """A botocore session whose built-in handlers are registered cheaper (see the module docstring), at the
    same point of its construction: before the initializers botocore calls (Powertools' user-agent hook);
    its credentials resolve through :class:`EnvFirstCredentialResolver`."""

    def _register_builtin_handlers(self, events: Any) -> None:
        # botocore's __init__ made ``events`` on the line before, over the emitter, and calls this next: the
        # session's aliaser becomes a QuickAliaser over the same emitter before anything is registered.
        self._events = events = QuickAliaser(self._original_handler)
        for event_name, handler, *how in builtin_handlers():  # as botocore's own _register_builtin_handlers
            if not how:
                self.register(event_name, handler)
            elif how[0] is botocore.handlers.REGISTER_FIRST:
                events.register_first(event_name, handler)
            elif how[0] is botocore.handlers.REGISTER_LAST:
                events.register_last(event_name, handler)

    def _create_credential_resolver(self) -> Any:
        chain = functools.partial(botocore.credentials.create_credential_resolver, self,
                                  region_name=self._last_client_region_used)
        if self.instance_variables().get("profile") is not None:
            return chain()  # a profile named for this session leaves the environment's credentials out
        return EnvFirstCredentialResolver(chain)


class EnvFirstCredentialResolver(botocore.credentials.CredentialResolver):
    """botocore's credential chain, whose first link, the environment's credentials, answers before the rest
    of the chain is built (see the module docstring): the same credentials, the same chain once it is asked
    for (``providers``, ``insert_before``, ``remove`` …)."""

    def __init__(self, build_chain: Any) -> None:  # noqa: D107 (botocore's __init__ only sets ``providers``)
        self._build_chain = build_chain
        self._providers: list[Any] | None = None

    @property
    def providers(self) -> list[Any]:  # type: ignore[override]
        if self._providers is None:
            self._providers = self._build_chain().providers
        return self._providers

    @providers.setter
    def providers(self, value: list[Any]) -> None:
        self._providers = value

    def load_credentials(self) -> Any:
        if self._providers is None:  # the chain starts with this provider (botocore's create_credential_resolver)
            credentials = botocore.credentials.EnvProvider().load()
            if credentials is not None:
                return credentials
        return super().load_credentials()


def new_core_session() -> botocore.session.Session:
    """``botocore.session.get_session()`` with its built-in handlers registered cheaper (module docstring)."""
    return CoreSession(event_hooks=BuiltinTrustingEmitter())


BOTO3_DATA = os.path.abspath(os.path.join(os.path.dirname(boto3.__file__), "data"))
"""boto3's resource definitions, which boto3 adds to its session's search paths (no client reads them)."""


def new_session() -> boto3.Session:
    """A boto3 session as ``boto3.Session()`` makes it, for clients (not resources: its loader leaves out
    :data:`BOTO3_DATA`), whose data loader reads with :class:`PlainJSONFileLoader`."""
    core = new_core_session()
    loader = core.get_component("data_loader")
    loader.file_loader = PlainJSONFileLoader()
    session = boto3.Session(botocore_session=core)
    loader.search_paths[:] = [path for path in loader.search_paths if os.path.abspath(path) != BOTO3_DATA]
    return session


SESSION: PerContainer[boto3.Session] = PerContainer(new_session)


_BUILDING = threading.Lock()


def client(service: str, **kwargs: Any) -> Any:
    """``boto3.client(service, **kwargs)`` from the container's session, one build at a time; only for the
    services of :data:`SERVICE_IDS` (the session lacks the other services' handlers)."""
    if service not in SERVICE_IDS:
        raise ValueError(f"{service!r} is not a service of the layer: add it to BOTOCORE_SERVICES "
                         "(layers/compactor/Makefile) and compactor_aws.aws_session.SERVICE_IDS")
    with _BUILDING:
        built = SESSION.get().client(service, **kwargs)
    verify_by_hash(built)
    return built


class HashedCASession(botocore.httpsession.URLLib3Session):
    """botocore's HTTP session, whose HTTPS connections verify with the hashed directory of their CA bundle
    (``_ca_bundle``, ``_ca_directory``; see the module docstring), given only by :func:`verify_by_hash`."""

    _ca_bundle: str
    _ca_directory: str

    def _setup_ssl_cert(self, conn: Any, url: str, verify: Any) -> None:
        super()._setup_ssl_cert(conn, url, verify)
        if conn.ca_certs is not None and conn.ca_certs == self._ca_bundle:
            conn.ca_certs, conn.ca_cert_dir = None, self._ca_directory


def verify_by_hash(built: Any) -> None:
    """Make ``built``'s HTTP session a :class:`HashedCASession` when its ``verify`` resolves to the bundle the
    layer's hashed directory was made from (:func:`compactor.ca_directory.hashed_directory`); else leave it."""
    http = getattr(getattr(built, "_endpoint", None), "http_session", None)
    if type(http) is not botocore.httpsession.URLLib3Session:
        return
    verify = http._verify
    if not verify:  # verify=False: no certificate is checked, nothing is loaded
        return
    bundle = botocore.httpsession.get_cert_path(verify)
    directory = ca_directory.hashed_directory(bundle) if isinstance(bundle, str) else None
    if directory is not None:
        http.__class__ = HashedCASession
        http._ca_bundle, http._ca_directory = bundle, directory
