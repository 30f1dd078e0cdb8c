"""Cold start as a user feels it: a new process imports a function's handler and answers its first
real request. Run: ``.venv/bin/python tests/benchmarks/cold_start.py [--runs N] [--tracing on|off]``.

The code is what Lambda runs: the layer's packages built into a temporary directory by the layer's
own recipe (``make -C layers/compactor code``: copied without any ``__pycache__`` of the checkout and
compiled to unchecked-hash bytecode, as ``sam build`` ships them), botocore trimmed by the same
recipe to the services the layer calls, the layer's other dependencies (its ``requirements.txt`` and
what they require) copied from their installed distributions, and the function's handler file copied
alone (Lambda compiles it at every cold start, and so does each sample). Samples and baselines start alike
(``_START``: the interpreter's usual start, then the standard modules Lambda's Python runtime has imported
before it imports a handler: ``json``, ``logging``, ``traceback``, ``concurrent.futures`` and a few more) and then take every
site-packages directory (and the checkout they run in) off their path and every importer but the standard
library's out of ``sys.meta_path`` (an editable install's finder maps ``compactor``, ``compactor_aws`` and
``compactor_cli`` to the checkout): nothing of this virtualenv or checkout (test and command-line tools a layer
never holds, a module missing from the built layer) is importable in them, and each asserts after its work
that every module it loaded came from the built layer, the function's directory or the standard library.

For each Lambda function (``compact``, ``s3_compact``, ``flow_worker``, ``window_jobs``, ``authorizer``) every
sample is a fresh interpreter that times

* ``import <handler module>`` (what Lambda's init phase runs), then
* the first invocation with a real event of a real size: a decision-mode ``POST /v1/compact`` through API
  Gateway's proxy event whose body is a real agent transcript of the corpus's typical size
  (:data:`FIRST_TRANSCRIPT`, 132 messages, a 216 KB body, five batches: :func:`first_request_body`), an S3
  ``ObjectCreated`` event whose object (the same request) is read from and written to S3, and a fan-out worker
  event: one batch of the API request's decision flow (its decision and summary calls on the bundled offers,
  16 fragments), as the fan-out runner cuts it and sends it (its Map item: the largest batch whose payload the
  runner carries in the execution's input; its result, 9 KB, is written to S3 as a worker writes any result
  above 6 KB). The event reaches the sample on its standard input and is parsed inside the timed first request,
  as Lambda's runtime parses it before calling the handler. (Until issue 11's twenty-fifth round the first
  request was a 5.5 KB request of ten messages: one batch, one small window, a worker result small enough to
  answer inline.) S3 is a ``moto_server`` on 127.0.0.1, so the botocore client a function builds on its first
  request is part of what is timed. It answers over HTTPS, as AWS does (:func:`make_certificates`), and the samples
  trust its test authority as a deployed function trusts AWS's: it is appended to the built layer's own CA bundle,
  from which the layer's recipe then makes the bundle's hashed directory (``make ca-certificates``;
  :func:`build_code`), and no sample sets ``AWS_CA_BUNDLE``, so each new connection of a sample verifies with what
  the layer's clients use on Lambda. A first request counts only when it compacted: the API's response and the
  object the S3 function writes say ``compacted`` (its messages changed), and every node of the flow (the workers':
  of their batch, which must give its summaries) ran without an error (:func:`compacted`, :func:`flow_ran`).
  A row ``worker (S3)`` runs the batch the runner uploads for this request (it carries the smallest payloads
  in the execution's input, as many as fit, so the largest batch, the one a request waits for, is read from
  S3), its payload read from S3; the goals hold for it too. A row ``compact (http)`` answers the
  same API request as a deployment whose catalog holds HTTP model offers (``COMPACTOR_CATALOG``: a decider on
  the native ``decisions`` transport, a summarizer on ``openai``, their key in an environment variable) does:
  its first request imports httpx, builds the pooled client and its TLS context, and makes its decision and
  summary calls over HTTPS to the fake provider of tests/fakes (:func:`start_provider`, with moto's
  certificate, verified through the layer's hashed directory); it counts only when the provider got them.
  A row ``worker (http)`` runs the worker's batch (its payload in the event) in such a deployment: its
  decision and summary go to the same provider over HTTPS, and it counts only when the provider got them (the
  fake provider's one-line summaries make a result small enough to answer inline: no S3 call).
  The row ``window_jobs`` is a windowed job's worker, which a Distributed Map starts once per window, up to
  ``WindowConcurrency`` at a time, each new container cold: one Map item of the same request's messages as one
  window (the request is far below a window's 4 MB: all 132 messages), its task (as ``plan`` writes it) read
  from S3, compacted on the bundled offers and its result written to S3; it counts only when that result
  compacted something and its flow made model calls.
* ``authorizer``: API Gateway's Lambda authorizer (``authorizer.handler``), which runs before every API
  request: a ``REQUEST`` event with ``Authorization: Bearer``. It imports no third-party package, so its whole
  cold start is its own and it has no ratio to the third-party imports (printed ``n/a``; its milliseconds
  and ``cold / json`` are the figures); it registers no SnapStart hooks, so its restored sample is a cold one.

Every sample gets the fixed environment variables template.yaml gives the functions and, as on
Lambda, its credentials in environment variables. Tracing is on by default, as deployed (``Tracing: Active`` in template.yaml): the samples see the
environment Lambda gives a traced invocation (``LAMBDA_TASK_ROOT``, a sampled ``_X_AMZN_TRACE_ID``;
segments go by UDP to a loopback port where nothing listens), so Powertools' tracer loads the X-Ray SDK
and patches what it patches. ``--tracing off`` is a function without tracing (and what ``compactor
serve`` runs): the handlers then never import the X-Ray SDK.

Two baselines run in the same loop, interleaved with the samples so they see the same machine:

* the third-party packages alone: exactly the non-standard-library modules that the whole sample
  (import and first request) loaded, imported and nothing else, in the order the sample first imported
  them (imported alphabetically, ``compact``'s list took longer in 21 of 25 alternated pairs, by 35 ms at the
  median of the paired differences, which flattered its ratio by about 0.1);
* a bare interpreter: a whole ``python -c "import json"`` process (its start, the import, its exit), timed
  from outside, the floor of ``cold / json``.

Reported per function: absolute medians, ``cold / third-party`` (goal <= 1.3), ``cold / json`` (the cold start
in bare interpreter starts: the cold sample's whole process, timed from outside as the floor is, over the bare
``python -c "import json"`` process; the sample's process also runs the few lines of the benchmark around
its clocks: reading its event, checking where its modules came from, printing its timings; no goal) and, with
SnapStart, ``restored / third-party`` (goal <= 1.15): the same sample run with the function's before-snapshot
hook (``compactor_aws.snapstart.before_snapshot``) executed between the import and the first request;
the hook's own time is reported apart, because on a SnapStart version it runs once when the version is
published and is part of the snapshot, not of any caller's cold start. The after-restore hook
(``after_restore``: fresh randomness, the pooled HTTP and AWS clients dropped) runs on every restore
before the invocation, so it is timed with the first request, which then rebuilds the clients it uses. Exit 1 when a goal is missed or
a first request does not succeed.

Fresh processes on a shared machine scatter widely (``s3_compact``'s third-party median moved between 322
and 528 ms across one afternoon's runs), so each ratio is printed with its 10th-90th percentiles over bootstrap resamples of the
runs: how far another run of the benchmark may read. The goals are judged on the medians, as before;
15 runs by default (with 7, the ratio of one function spanned 1.12-1.50 from the 10th to the 90th
percentile, with 15 1.21-1.44; docs/performance.md#how-far-a-run-can-be-trusted).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
LAYER = REPO / "layers" / "compactor"  # its Makefile builds the layer
EVENTS = REPO / "tests" / "events"
# The transcript of every row's first request: a real agent's, of the corpus's typical size (docs/performance.md,
# "A real-size first request"): 263,808 bytes as stored, the file nearest the corpus's median (about 265 KB), in
# openai-chat with tool calls (132 messages, 65 calls), a run that ended as submitted.
FIRST_TRANSCRIPT = REPO / "tests" / "fixtures" / "corpus" / "msa-v2-toolcalls_deepseek-chat_astroid-1978.json"
BUCKET = "compactor-bench-cold"
GOAL_COLD = 1.3
GOAL_RESTORED = 1.15
OWN_ROOTS = {"compactor", "compactor_aws", "compact", "s3_compact", "flow_worker", "authorizer", "window_jobs"}

# One sample: import, optional before-snapshot hook, first request; prints timings and what loaded.
# Both scripts start alike before their clocks: the interpreter's usual start (``site`` and what it loads), then
# what the Lambda runtime's bootstrap has imported before init (``RUNTIME_PRELOADED``, below), then no
# site-packages on the path (only the layer's dependencies are importable, as in a deployed layer). The path
# keeps the standard library's directories only (not ``''``, the checkout the script runs in, nor a directory of
# ``PYTHONPATH``, nor an editable install's placeholder), and the importers only the standard library's: an
# editable install of this checkout leaves its finder in ``sys.meta_path`` (and a path hook), which would load
# ``compactor_cli`` or any module missing from the built layer from the checkout. Each script then checks where
# every module it loaded came from.
_NO_SITE_PACKAGES = (
    'sys.path[:] = [path for path in sys.path if path.startswith(sys.base_prefix + "/") '
    'and not path.endswith(("site-packages", "dist-packages"))]\n'
    'sys.meta_path[:] = [finder for finder in sys.meta_path '
    'if finder.__module__ in ("_frozen_importlib", "_frozen_importlib_external")]\n'
    'sys.path_hooks[:] = [hook for hook in sys.path_hooks '
    'if getattr(hook, "__module__", None) in ("zipimport", "_frozen_importlib_external")]\n')
# What Lambda's managed Python runtime has imported before a function's init: its bootstrap (the runtime interface
# client, ``awslambdaric.bootstrap`` and the modules it loads) imports these standard modules before it imports the
# handler, so a deployed init does not pay for them, nor for what they import (docs/performance.md#cold-start-testsbenchmarkscold_startpy).
RUNTIME_PRELOADED = ("importlib", "json", "logging", "os", "sys", "time", "traceback", "decimal", "math",
                     "concurrent.futures")
_START = (f"import {', '.join(RUNTIME_PRELOADED)}\n"
          "from concurrent.futures import ThreadPoolExecutor\n" + _NO_SITE_PACKAGES)
STDLIB = os.path.dirname(os.__file__)  # the standard library of this interpreter (the samples run the same)
# Each script's last check: every module it loaded (since ``before``) came from the built layer or the function's
# directory (``allowed``) or the standard library (``stdlib``, not its site-packages).
_CHECK_ORIGINS = """\
strays = [(name, module.__file__) for name, module in list(sys.modules.items())
          if name not in before and getattr(module, "__file__", None) and not module.__file__.startswith({allowed!r})
          and not (module.__file__.startswith({stdlib!r}) and "-packages/" not in module.__file__)]
assert not strays, f"loaded from outside the built layer, the function and the standard library: {{strays[:5]}}"
"""
_SAMPLE = _START + """\
sys.path[:0] = {paths!r}
raw_event = sys.stdin.read()  # the event's JSON text, as the runtime receives it (its parsing is timed below)
before = set(sys.modules)
t0 = time.perf_counter()
import {module} as handler_module
t1 = time.perf_counter()
if {snapstart!r}:
    from compactor_aws import snapstart
    snapstart.before_snapshot()
t2 = time.perf_counter()
if {snapstart!r}:
    snapstart.after_restore()  # Lambda runs it on every restore, before the invocation: timed with it
event = json.loads(raw_event)  # the runtime parses the event in the invocation, before the handler
class Context:
    function_name = {module!r}; memory_limit_in_mb = 1024; aws_request_id = "bench"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:" + {module!r}
    log_group_name = log_stream_name = function_version = "bench"
    def get_remaining_time_in_millis(self): return 40000
answer = handler_module.handler(event, Context())
t3 = time.perf_counter()
assert all(sys.modules[name].__file__.startswith({paths[1]!r}) for name in ("compactor", "botocore")
           if name in sys.modules), "the built layer is not what ran"
""" + _CHECK_ORIGINS + """\
loaded = [name for name in sys.modules if name not in before]  # in the order they were first imported
print(json.dumps({{"import": t1 - t0, "hook": t2 - t1, "first": t3 - t2, "answer": answer, "loaded": loaded}}))
"""
_IMPORTS = """\
{start}sys.path[:0] = {paths!r}
names = {names!r}
before = set(sys.modules)
t0 = time.perf_counter()
for name in names:
    try:
        __import__(name)
    except ImportError:  # aliases some packages register in sys.modules without an importable file
        pass
t1 = time.perf_counter()
""" + _CHECK_ORIGINS + """\
print(t1 - t0)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_certificates(directory: Path) -> tuple[Path, Path, bytes]:
    """A test certificate authority and a server certificate for 127.0.0.1 signed by it (RSA 2048, as AWS's
    endpoints and roots use): the certificate's and its key's files in ``directory``, and the authority's
    certificate (PEM) for the built layer's CA bundle (:func:`build_code`)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    usage = dict(content_commitment=False, key_encipherment=False, data_encipherment=False, key_agreement=False,
                 encipher_only=False, decipher_only=False)

    def certificate(subject: str, key: Any, issuer: x509.Name, issuer_key: Any, *, authority: bool) -> Any:
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(issuer).public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=2))
                   .add_extension(x509.BasicConstraints(ca=authority, path_length=None), critical=True)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                                  critical=False))
        if authority:
            builder = builder.add_extension(x509.KeyUsage(digital_signature=False, key_cert_sign=True, crl_sign=True,
                                                          **usage), critical=True)
        else:
            builder = (builder
                       .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=False, crl_sign=False,
                                                    **usage), critical=True)
                       .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                       .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(subject))]),
                                      critical=False))
        return builder.sign(issuer_key, hashes.SHA256())

    authority_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    authority_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cold_start.py test authority")])
    authority = certificate("cold_start.py test authority", authority_key, authority_name, authority_key,
                            authority=True)
    server_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    server = certificate("127.0.0.1", server_key, authority_name, authority_key, authority=False)
    cert_file, key_file = directory / "moto.crt", directory / "moto.key"
    cert_file.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    return cert_file, key_file, authority.public_bytes(serialization.Encoding.PEM)


def layer_bundle(code: Path) -> Path:
    """The CA bundle the built layer's botocore and httpx verify with on Lambda: certifi's ``cacert.pem`` when
    certifi is in the layer (botocore prefers it), else botocore's own."""
    python = code / "layer" / "python"
    return next(path for path in (python / "certifi" / "cacert.pem", python / "botocore" / "cacert.pem")
                if path.is_file())


# moto_server's application on werkzeug's server, as ``moto_server -c cert -k key`` runs it, but keeping its
# connections open between requests as AWS's endpoints do: werkzeug's development server answers every request
# with ``Connection: close`` and then reads whatever the client sent after the request (it does not read request
# bodies it was not asked for), so each of a sample's AWS calls opened a new connection, and over HTTPS paid a
# handshake and botocore's loading of the CA bundle, which a Lambda function's pooled connection to S3 or DynamoDB
# pays once per client. Here each request's body (chunked or not) is read whole before the application runs, and
# the reading after it finds nothing. The server's sockets set TCP_NODELAY: werkzeug writes a response's headers
# and its body in two sends, and on a kept connection Nagle's algorithm held the body until the client acknowledged
# the headers, which Linux delays up to 40 ms. Every AWS call of a sample, a TLS connection's first included, waited
# about 43 ms for it (a PutItem on a kept connection: 48 ms, then 5 ms with the option), a wait that was moto's
# server's and not the function's. DynamoDB answers in about that time; S3 Standard's first byte takes longer, so
# the S3 calls' waits here are a floor (docs/performance.md).
_MOTO = """\
import io, os, sys
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app

class Drained:
    def read(self, *args):
        return b""
    readline = read

class KeepAlive(MotoRequestHandler):
    disable_nagle_algorithm = True  # TCP_NODELAY, as AWS's endpoints answer: see above

    def make_environ(self):
        environ = super().make_environ()
        if environ.get("wsgi.input_terminated"):  # a chunked body: werkzeug's reader of its chunks
            body = environ["wsgi.input"].read()
        else:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
        environ["wsgi.input"] = io.BytesIO(body)
        self.rfile = Drained()  # werkzeug reads what is left after the response: the next request's
        return environ

    def run_wsgi(self):
        rfile = self.rfile
        try:
            super().run_wsgi()
        finally:
            self.rfile = rfile

    def send_header(self, keyword, value):
        if not (keyword.lower() == "connection" and value.lower() == "close"):
            super().send_header(keyword, value)

host, port, cert, key = sys.argv[1:]
os.environ.setdefault("MOTO_PORT", port)
app = DomainDispatcherApplication(create_backend_app)
app.debug = True
run_simple(host, int(port), app, threaded=True, ssl_context=(cert, key), request_handler=KeepAlive)
"""


def start_moto(cert_file: Path, key_file: Path) -> tuple[subprocess.Popen[bytes], str]:
    """moto's server on a free loopback port, over HTTPS with the given certificate, keeping connections open
    (:data:`_MOTO`)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", _MOTO, "127.0.0.1", str(port), str(cert_file), str(key_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"https://127.0.0.1:{port}"
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server, url
        except OSError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("moto_server did not start")


class Deployment:
    """What template.yaml gives each function: its environment variables (the Globals' and its own),
    with the stack's tables, bucket and state machine replaced by the benchmark's (the tables are
    created on moto with the template's keys) and parameters at their defaults. As deployed, the API
    and S3 functions write the usage ledger and keep idempotency records in DynamoDB."""

    NO_VALUE = object()

    def __init__(self, dynamodb: Any) -> None:
        from compactor_cli.sam_template import load_template

        self.template = load_template(REPO / "template.yaml")
        self.refs: dict[str, str] = {name: str(spec.get("Default", ""))
                                     for name, spec in self.template["Parameters"].items()}
        self.refs |= {"AWS::Region": "us-east-1", "TranscriptBucket": BUCKET,
                      "WindowedJobStateMachine": "arn:aws:states:us-east-1:123456789012:stateMachine:bench",
                      "BatchFanOutStateMachine": "arn:aws:states:us-east-1:123456789012:stateMachine:fanout"}
        for table in ("UsageTable", "IdempotencyTable"):
            spec = self.template["Resources"][table]["Properties"]
            name = self.refs[table] = f"compactor-bench-{table.lower()}"
            try:
                dynamodb.create_table(TableName=name, KeySchema=spec["KeySchema"], BillingMode=spec["BillingMode"],
                                      AttributeDefinitions=spec["AttributeDefinitions"],
                                      **{key: spec[key] for key in ("GlobalSecondaryIndexes",) if key in spec})
            except dynamodb.exceptions.ResourceInUseException:
                pass

    def environment(self, handler_module: str) -> dict[str, str]:
        functions = [spec["Properties"] for spec in self.template["Resources"].values()
                     if spec["Type"] == "AWS::Serverless::Function"
                     and spec["Properties"]["Handler"].split(".")[0] == handler_module]
        variables = {**self.template["Globals"]["Function"]["Environment"]["Variables"],
                     **functions[0].get("Environment", {}).get("Variables", {})}
        resolved = {name: self.resolve(value) for name, value in variables.items()}
        return {name: value for name, value in resolved.items() if value is not self.NO_VALUE}

    def resolve(self, value: Any) -> Any:
        if not isinstance(value, dict):
            return str(value)
        (function, argument), = value.items()
        if function == "Ref":
            return self.NO_VALUE if argument == "AWS::NoValue" else self.refs[argument]
        if function == "Fn::If":
            condition, then, otherwise = argument
            return self.resolve(then if self.holds(self.template["Conditions"][condition]) else otherwise)
        raise SystemExit(f"cold_start.py cannot resolve {value} of template.yaml")

    def holds(self, condition: dict[str, Any]) -> bool:
        (function, argument), = condition.items()
        if function == "Fn::Equals":
            return self.resolve(argument[0]) == self.resolve(argument[1])
        if function == "Fn::Not":
            return not self.holds(argument[0])
        raise SystemExit(f"cold_start.py cannot evaluate {condition} of template.yaml")


def child_env(endpoint: str, function: Function, *, tracing: bool) -> dict[str, str]:
    # Lambda sets no CA bundle variable: botocore honours REQUESTS_CA_BUNDLE too, and httpx SSL_CERT_FILE/DIR.
    # Nor a proxy: httpx would send the HTTP offers' calls to the loopback provider through one.
    skipped = ("AWS_", "COMPACTOR_", "POWERTOOLS_", "LAMBDA_", "_X_AMZN_", "PYDANTIC_", "REQUESTS_CA_BUNDLE",
               "CURL_CA_BUNDLE", "SSL_CERT_", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy",
               "https_proxy", "all_proxy", "no_proxy")
    env = {k: v for k, v in os.environ.items() if not k.startswith(skipped)}
    env.update(function.environment)
    env.update({
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
        "POWERTOOLS_DEV": "false", "PYTHONDONTWRITEBYTECODE": "1",
    })
    if tracing:  # what Lambda sets for a traced invocation of this function
        env.update({
            "LAMBDA_TASK_ROOT": function.paths[0], "AWS_LAMBDA_FUNCTION_NAME": function.name,
            "_X_AMZN_TRACE_ID": f"Root=1-{int(time.time()):08x}-{os.urandom(12).hex()};"
                                f"Parent={os.urandom(8).hex()};Sampled=1",
            "AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{free_port()}",
        })
    return env


def layer_dependencies() -> list[Any]:
    """The installed distributions that ``layers/compactor/requirements.txt`` names, with the extras it asks
    for, and every distribution they require in turn (markers evaluated for this interpreter): what
    ``sam build`` installs into the layer, and nothing else of this virtualenv (its test and CLI tools)."""
    import importlib.metadata

    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    lines = (LAYER / "requirements.txt").read_text().splitlines()
    wanted = [Requirement(line) for line in (line.split("#")[0].strip() for line in lines) if line]
    found: dict[str, tuple[Any, set[str]]] = {}
    while wanted:
        requirement = wanted.pop()
        key = requirement.name.lower().replace("_", "-")
        extras = set(requirement.extras)
        if key in found and extras <= found[key][1]:
            continue
        extras |= found[key][1] if key in found else set()
        distribution = importlib.metadata.distribution(requirement.name)
        found[key] = (distribution, extras)
        for text in distribution.requires or []:
            needed = Requirement(text)
            if needed.marker is None or any(needed.marker.evaluate({**default_environment(), "extra": extra})
                                            for extra in extras | {""}):
                wanted.append(needed)
    return [distribution for distribution, _ in found.values()]


def copy_distribution(distribution: Any, python: Path) -> None:
    """Copy an installed distribution's files that live in site-packages (its packages and modules, and its
    metadata) into ``python``, as pip installs them into a layer; the layer's recipe (``make code``) then
    compiles everything there to unchecked-hash bytecode, as ``sam build`` ships it."""
    site = Path(distribution.locate_file("")).resolve()
    names = [Path(str(name)) for name in distribution.files or () if not str(name).startswith("..")]
    for top in sorted({name.parts[0] for name in names} - {"__pycache__"}):  # bytecode comes from ``make code``
        source = site / top
        if source.is_dir():
            shutil.copytree(source, python / top, dirs_exist_ok=True)
        elif source.is_file():
            shutil.copy2(source, python / top)


def build_code(root: Path, authority: bytes) -> Path:
    """The layer's packages as ``sam build`` ships them, under ``root/layer/python``; each function's
    handler file alone under ``root/functions/<name>``. Returns ``root``.

    The layer's dependencies (:func:`layer_dependencies`) are copied in from this interpreter's installed
    distributions, and the samples and baselines run without this virtualenv's site-packages on their path
    (:data:`_START`), so they import exactly what a deployed layer holds: this virtualenv's other packages, for
    one, make ``import httpx`` load click and pygments (about 20 ms here) for a command line a layer never has.
    botocore is the one dependency the layer's recipe changes (it keeps the data of the services the
    layer calls): it is copied in first and trimmed by the same recipe. The test ``authority`` is appended to the
    layer's CA bundle (:func:`layer_bundle`) before the recipe makes the bundle's hashed directory
    (``ca-certificates``), as AWS's authorities are in it on Lambda: the samples verify moto's certificate with
    what the layer's clients use there."""
    import botocore

    python = root / "layer" / "python"
    shutil.copytree(Path(botocore.__file__).parent, python / "botocore",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for distribution in layer_dependencies():
        if distribution.metadata["Name"].lower() != "botocore":
            copy_distribution(distribution, python)
    bundle = layer_bundle(root)
    bundle.write_bytes(bundle.read_bytes().rstrip(b"\n") + b"\n" + authority)
    for target in ("botocore-data", "code", "ca-certificates"):
        subprocess.run(["make", "-s", "-C", str(LAYER), target, f"ARTIFACTS_DIR={root / 'layer'}",
                        f"PYTHON={sys.executable}"], check=True)
    # Without a rehash tool the recipe only warns and ships no directory: the samples would then measure the
    # bundle's whole load per connection while the figures claim the layer's directory.
    if not (root / "layer" / "python" / "compactor" / "ca-certificates" / "manifest.json").is_file():
        raise SystemExit("cold_start.py: the layer's build made no hashed CA directory (no `openssl rehash` or "
                         "`c_rehash`): install openssl")
    for handler in (REPO / "functions").glob("*/*.py"):
        target = root / "functions" / handler.parent.name
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(handler, target / handler.name)
    return root


class Function:
    """One function's handler module, the event of its first request and the check of its answer."""

    def __init__(self, name: str, event: dict[str, Any], ok: Any, code: Path, deployment: Deployment, *,
                 label: str | None = None, hooks: bool = True, environment: dict[str, str] | None = None) -> None:
        self.name, self.event, self.ok = name, event, ok
        self.label = label or name  # its row
        self.hooks = hooks  # whether its handler registers the SnapStart hooks (the authorizer does not)
        self.paths = [str(code / "functions" / name), str(code / "layer" / "python")]
        # template.yaml's, and what an operator sets for this row (a catalog of HTTP model offers)
        self.environment = {**deployment.environment(name), **(environment or {})}


PROVIDER_KEY_ENV = "COLD_START_PROVIDER_KEY"


def http_offers_catalog(code: Path, provider: Any) -> Path:
    """A catalog of two HTTP model offers on the fake provider (over HTTPS), as an operator deploys with
    ``COMPACTOR_CATALOG``: a decider on the native ``decisions`` transport and a summarizer on ``openai``, their key
    in an environment variable (``compact_overhead.bench_catalog``, the offers ``e2e_concurrency.py`` calls)."""
    from compact_overhead import bench_catalog

    path = code / "http-offers-catalog.json"
    path.write_text(json.dumps(bench_catalog(provider, key_env=PROVIDER_KEY_ENV)))
    return path


def start_provider(cert_file: Path, key_file: Path) -> Any:
    """The fake provider of tests/fakes over HTTPS with moto's certificate (its authority is in the layer's bundle,
    so the function's httpx client verifies it with the layer's hashed directory), answering as
    ``compact_overhead``'s runs are answered: every fragment ``summarize``, every summary a short line."""
    sys.path[:0] = [str(REPO / "tests"), str(Path(__file__).resolve().parent)]
    import ssl

    from compact_overhead import summarize_all_responder
    from fakes.provider_server import FakeProviderServer

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    provider = FakeProviderServer(ssl_context=context).start()
    provider.responder = summarize_all_responder()
    return provider


def first_request_body() -> str:
    """The body of the API's first request: :data:`FIRST_TRANSCRIPT` as ``compactor compact FILE --mode decision``
    sends it (its messages unchanged, ``format`` and ``mode``), with the settings of the decision request in
    ``tests/events/compact-decision.json`` (``keep_recent``, ``target_ratio``, ``decision_policy_ir``), whose
    ten messages it replaces."""
    from compactor.transcripts import read_transcript

    settings = json.loads(json.loads((EVENTS / "compact-decision.json").read_text())["body"])
    settings.pop("messages")
    transcript = read_transcript(FIRST_TRANSCRIPT.read_text(encoding="utf-8"))
    return json.dumps(transcript.compact_body(settings, mode="decision"))


def fanout_payloads(compact_body: str) -> list[str]:
    """What the fan-out runner sends its workers for the decision flow the API's first request runs: each
    component's payload (one batch: its decision and its summary call, with the data nodes around them), cut
    by the runner's own partition, as the JSON text the runner carries inline or uploads. The first is a
    worker's real first request, not a data-only flow."""
    import asyncio

    from compactor import service
    from compactor.budget import Deadline
    from compactor.container import get_router
    from compactor.flow import run_flow
    from compactor.flow.partition import partition_flow, start_value
    from compactor.models import CompactRequest

    payloads: list[dict[str, Any]] = []

    async def capture(admitted: Any, flow_input: Any, *, router: Any, deadline: Any, on_event: Any = None,
                      conversation: Any = ()) -> Any:
        partition = partition_flow(admitted, router.admit_policy)
        if partition is not None:
            value = start_value(flow_input, conversation)
            payloads.extend(component.payload(value, conversation) for component in partition.components)
        return await run_flow(admitted, flow_input, router=router, deadline=deadline, on_event=on_event,
                              conversation=conversation)

    request = CompactRequest.model_validate_json(compact_body)
    status, _ = asyncio.run(service.compact(request, deadline=Deadline.after_ms(30_000), router=get_router(),
                                            flow_runner=capture))
    if status != 200 or not payloads:
        raise SystemExit("cold_start.py: the API's decision request made no fan-out component")
    kinds = {node.get("kind") for node in payloads[0]["flow_ir"][1].values()}
    if not {"decision", "llm"} <= kinds:
        raise SystemExit(f"cold_start.py: the worker's component holds no model call ({sorted(kinds)})")
    from compactor.jsonutil import dense_dumps

    return [dense_dumps(payload) for payload in payloads]


def window_task(compact_body: str) -> dict[str, Any]:
    """The first window task of the request's messages, as a windowed job's ``plan`` makes it (the request, far
    below a window's 4 MB, is one window: all its messages)."""
    from compactor.compaction.windows import RunState, Settings, windows
    from compactor.models import CompactRequest

    request = CompactRequest.model_validate(json.loads(compact_body))
    state = RunState.begin(Settings.from_request(request))
    context = state.scan(iter(request.messages))
    return next(windows(iter(request.messages), context, state.pass_settings()))


def flow_ran(nodes: list[dict[str, Any]]) -> bool:
    """A flow's nodes (``flow_nodes`` of a response's decision trace or of a worker's result) all ran: none with
    an ``error`` (a model call that failed, answered by its fallback) or ``skipped`` after one."""
    return bool(nodes) and not any(node.get("error") or node.get("skipped") for node in nodes)


def compacted(document: dict[str, Any]) -> bool:
    """A compaction's response (the API's body, the S3 function's written object) says ``compacted`` and its flow
    ran every node: a failing model call still answers 200 with ``compacted`` false, or with the node's ``error``
    and its fallback, which is no first request a user would call a success."""
    nodes = document.get("x_router", {}).get("decision_trace", {}).get("flow_nodes") or []
    return document.get("compacted") is True and flow_ran(nodes)


def api_compacted(answer: dict[str, Any]) -> bool:
    """The API's proxy answer: status 200 and a body that :func:`compacted` accepts."""
    if answer.get("statusCode") != 200:
        return False
    body = answer.get("body") or ""
    if answer.get("isBase64Encoded"):
        import base64
        import gzip

        raw = base64.b64decode(body)
        body = (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()
    try:
        return compacted(json.loads(body))
    except ValueError:
        return False


def prepare_functions(endpoint: str, run_id: str, code: Path, bundle: Path, provider: Any) -> list[Function]:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", verify=str(bundle),
                      aws_access_key_id="bench", aws_secret_access_key="bench")
    try:
        s3.create_bucket(Bucket=BUCKET)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    deployment = Deployment(boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1", verify=str(bundle),
                                         aws_access_key_id="bench", aws_secret_access_key="bench"))
    # The API's proxy event (tests/events/compact-decision.json) carrying a real transcript (first_request_body).
    compact_event = json.loads((EVENTS / "compact-decision.json").read_text())
    compact_event["body"] = first_request_body()
    transcript = compact_event["body"].encode()  # the S3 row's object: the same request as the API's first one
    from compactor_aws.stepfunctions_runner import map_items

    # The Map items the runner makes for the request's components: the smallest payloads inline, as many as fit in
    # the execution's input, the others uploaded (for this request: four of its five batches inline, the largest in
    # S3). Each worker row runs the largest batch of its kind: ``flow_worker`` and ``worker (http)`` the largest one
    # carried in its item, ``worker (S3)`` the largest one read from S3, as the batches a request waits for.
    payloads = fanout_payloads(compact_event["body"])
    items, uploads = map_items(payloads, f"fanout/{run_id}/")
    for key, text in uploads.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=text.encode())
    inline = [item for item in items if item["payload"] is not None]
    stored = [index for index, item in enumerate(items) if item["key"] is not None]
    if not inline or not stored:
        raise SystemExit(f"cold_start.py: the request's batches are not carried both ways ({len(inline)} inline, "
                         f"{len(stored)} in S3 of {len(items)})")
    inline_item = max(inline, key=lambda item: len(item["payload"]))
    stored_item = items[max(stored, key=lambda index: len(payloads[index]))]

    # A windowed job's worker: the request's messages as one window, its task where ``plan`` would write it.
    task_key = f"work/{run_id}/p1/w0.json"
    s3.put_object(Bucket=BUCKET, Key=task_key, Body=json.dumps(window_task(compact_event["body"])).encode())
    window_result: list[str] = []

    def window_event_for(sample: int) -> dict[str, Any]:
        window_result[:] = [f"work/{run_id}/p1/w0.{sample}.result.json"]  # each sample its own result
        return {"Items": [{"task_key": task_key, "result_key": window_result[0]}], "BatchInput": {"bucket": BUCKET}}

    def window_compacted(answer: dict[str, Any]) -> bool:
        """The worker compacted its window: the result it wrote changed a unit, through model calls."""
        if answer != {"windows": 1}:
            return False
        result = json.loads(s3.get_object(Bucket=BUCKET, Key=window_result[0])["Body"].read())
        actions = result.get("actions") or {}
        return result.get("ok") is True and result.get("model_calls", 0) > 0 and 0 <= actions.get("keep", -1) < sum(
            actions.values())

    s3_event = json.loads((EVENTS / "s3-put.json").read_text())
    authorizer_event = json.loads((EVENTS / "authorizer-bearer.json").read_text())
    worker_event = {"bucket": BUCKET, "item": inline_item, "deadline_epoch_ms": int(time.time() * 1000) + 3_600_000}
    worker_s3_event = {**worker_event, "item": stored_item}

    def s3_event_for(sample: int) -> dict[str, Any]:
        key = f"incoming/{run_id}/{sample}.json"
        put = s3.put_object(Bucket=BUCKET, Key=key, Body=transcript)
        event = json.loads(json.dumps(s3_event))
        record = event["Records"][0]["s3"]
        record["bucket"]["name"] = BUCKET
        record["object"].update({"key": key, "eTag": put["ETag"].strip('"'), "size": len(transcript)})
        record["object"].pop("versionId", None)
        return event

    def compact_event_for(sample: int) -> dict[str, Any]:
        # API Gateway gives every request its own id, which names the request's usage ledger entry: with
        # the event's fixed id, every sample but the first found its entry written (a failed conditional
        # write, an error path no deployed request takes).
        event = json.loads(json.dumps(compact_event))
        event["requestContext"]["requestId"] = f"{run_id}-{sample}"
        return event

    def worker_ran(answer: dict[str, Any]) -> bool:
        """The component ran to its end (its result inline, or in S3 when large, as this batch's is) and gave its
        output: the batch's summaries, by fragment."""
        result = answer.get("result")
        if result is None:
            result = json.loads(s3.get_object(Bucket=BUCKET, Key=answer["result_key"])["Body"].read())
        return (result.get("ok") is True and result.get("failed_node") is None and flow_ran(result.get("flow_nodes"))
                and bool(result.get("output")))

    def object_compacted(answer: dict[str, Any]) -> bool:
        """The S3 function compacted the object and wrote a response :func:`compacted` accepts."""
        results = answer.get("results", [])
        if [r.get("result") for r in results] != ["compacted"]:
            return False
        return compacted(json.loads(s3.get_object(Bucket=BUCKET, Key=results[0]["key"])["Body"].read()))

    seen = [0]

    def provider_called(answer: dict[str, Any]) -> bool:
        """The API compacted, and through the HTTP offers: the provider got this request's calls (a decision
        and a summary at least), not the built-in offers."""
        made, seen[0] = len(provider.requests) - seen[0], len(provider.requests)
        return api_compacted(answer) and made >= 2

    def worker_provider_called(answer: dict[str, Any]) -> bool:
        """The worker ran its batch, and through the HTTP offers: the provider got its decision and summary."""
        made, seen[0] = len(provider.requests) - seen[0], len(provider.requests)
        return answer.get("status") == "done" and worker_ran(answer) and made >= 2

    http_environment = {"COMPACTOR_CATALOG": str(http_offers_catalog(code, provider)),
                        PROVIDER_KEY_ENV: "cold-start-key"}
    return [
        Function("compact", compact_event_for, api_compacted, code, deployment),
        Function("compact", compact_event_for, provider_called, code, deployment, label="compact (http)",
                 environment=http_environment),
        Function("s3_compact", s3_event_for, object_compacted, code, deployment),
        Function("flow_worker", worker_event, lambda a: a.get("status") == "done" and worker_ran(a), code, deployment),
        Function("flow_worker", worker_s3_event, lambda a: a.get("status") == "done" and worker_ran(a), code,
                 deployment, label="worker (S3)"),
        Function("flow_worker", worker_event, worker_provider_called, code, deployment, label="worker (http)",
                 environment=http_environment),
        Function("window_jobs", window_event_for, window_compacted, code, deployment),
        Function("authorizer", authorizer_event, lambda a: bool(a.get("usageIdentifierKey")), code, deployment,
                 hooks=False),
    ]


def run_sample(function: Function, sample: int, env: dict[str, str], *, snapstart: bool) -> dict[str, Any]:
    event = function.event(sample) if callable(function.event) else function.event
    script = _SAMPLE.format(paths=function.paths, module=function.name, snapstart=snapstart and function.hooks,
                            stdlib=STDLIB + os.sep, allowed=tuple(path + os.sep for path in function.paths))
    # The event on standard input: a real transcript's is larger than one command-line argument may be (128 KiB).
    text = json.dumps(event)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", script], input=text, capture_output=True, text=True, env=env,
                          cwd=REPO)
    process = time.perf_counter() - started  # the whole process as its caller waits for it (see time_bare_json)
    if done.returncode != 0:
        raise SystemExit(f"{function.name}: sample failed\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process"] = process
    if not function.ok(result["answer"]):
        raise SystemExit(f"{function.name}: first request did not succeed: {json.dumps(result['answer'])[:500]}")
    return result


def time_imports(names: list[str], env: dict[str, str], paths: list[str]) -> float:
    """Import ``names`` alone, from the same places as a sample (``paths`` first), after the sample's own start
    (:data:`_START`)."""
    script = _IMPORTS.format(start=_START, names=names, paths=paths, stdlib=STDLIB + os.sep,
                             allowed=tuple(path + os.sep for path in paths))
    done = subprocess.run([sys.executable, "-c", script],
                          capture_output=True, text=True, env=env, cwd=REPO, check=True)
    return float(done.stdout.split()[-1])


def time_bare_json(env: dict[str, str]) -> float:
    """The floor of ``cold / json``: a whole ``python -c "import json"`` process (the interpreter's start, the
    import, its exit), timed from outside as :func:`run_sample` times a sample's whole process, with the
    sample's environment and directory."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import json"], capture_output=True, env=env, cwd=REPO, check=True)
    return time.perf_counter() - started


def third_party(loaded: list[str]) -> list[str]:
    return [name for name in loaded if name.split(".")[0] not in sys.stdlib_module_names
            and name.split(".")[0] not in OWN_ROOTS and not name.startswith("_sysconfigdata")]


def spread(samples: list[float], baseline: list[float], draws: int = 2000) -> tuple[float, float]:
    """The 10th and 90th percentiles of ``median(samples) / median(baseline)`` over bootstrap resamples of
    the runs (each run's sample and baseline drawn together, as they ran side by side): how far the
    ratio moves from one run of the benchmark to the next on this machine, with a fixed seed."""
    draw = random.Random(0)
    runs = range(len(samples))
    ratios = []
    for _ in range(draws):
        picked = [draw.choice(runs) for _ in runs]
        ratios.append(statistics.median(samples[i] for i in picked) / statistics.median(baseline[i] for i in picked))
    ratios.sort()
    return ratios[draws // 10], ratios[draws * 9 // 10]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per measurement (default 15)")
    parser.add_argument("--tracing", choices=["on", "off"], default="on",
                        help="X-Ray tracing of the functions: on as deployed (default), or off")
    args = parser.parse_args()

    failed = False
    build = tempfile.TemporaryDirectory(prefix="cold-start-")
    cert_file, key_file, authority = make_certificates(Path(build.name))
    server, endpoint = start_moto(cert_file, key_file)
    provider = start_provider(cert_file, key_file)
    try:
        code = build_code(Path(build.name), authority)
        bundle = layer_bundle(code)
        functions = prepare_functions(endpoint, run_id=f"{os.getpid()}-{int(time.time())}", code=code, bundle=bundle,
                                      provider=provider)
        print(f"{'function':<14} {'json':>7} {'3rd-party':>10} {'cold':>8} {'ratio':>6} {'÷json':>6}   "
              f"{'restored':>8} {'ratio':>6} {'hook':>7}   {'ratios p10-p90':>19}   (ms, medians of {args.runs} fresh processes; "
              f"tracing {args.tracing})")
        sample = 0
        for function in functions:
            env = child_env(endpoint, function, tracing=args.tracing == "on")
            cold, restored, hooks, deps, floor, whole = [], [], [], [], [], []
            names: list[str] = []
            for _ in range(args.runs):
                sample += 1
                plain = run_sample(function, sample, env, snapstart=False)
                names = names or third_party(plain["loaded"])
                sample += 1
                snap = run_sample(function, sample, env, snapstart=True)
                cold.append(plain["import"] + plain["first"])
                restored.append(snap["import"] + snap["first"])
                hooks.append(snap["hook"])
                whole.append(plain["process"])
                deps.append(time_imports(names, env, function.paths))
                floor.append(time_bare_json(env))
            med = {k: statistics.median(v) * 1000 for k, v in
                   {"cold": cold, "restored": restored, "hook": hooks, "deps": deps, "json": floor,
                                                  "whole": whole}.items()}
            if not names:  # no third-party package: the whole cold start is the function's own (no ratio)
                print(f"{function.label:<14} {med['json']:7.1f} {'none':>10} {med['cold']:8.1f} {'n/a':>6} "
                      f"{med['whole'] / med['json']:6.1f}   {med['restored']:8.1f} {'n/a':>6} {'none':>7}")
                continue
            ratio_cold, ratio_restored = med["cold"] / med["deps"], med["restored"] / med["deps"]
            (cold_low, cold_high), (restored_low, restored_high) = spread(cold, deps), spread(restored, deps)
            print(f"{function.label:<14} {med['json']:7.1f} {med['deps']:10.1f} {med['cold']:8.1f} {ratio_cold:6.2f} "
                  f"{med['whole'] / med['json']:6.1f}   "
                  f"{med['restored']:8.1f} {ratio_restored:6.2f} {med['hook']:7.1f}   "
                  f"{cold_low:.2f}-{cold_high:.2f} {restored_low:.2f}-{restored_high:.2f}")
            failed |= ratio_cold > GOAL_COLD or ratio_restored > GOAL_RESTORED
        print(f"goals: cold / third-party <= {GOAL_COLD}; restored (SnapStart) / third-party <= {GOAL_RESTORED}"
              f" (on the medians, every row); p10-p90: the two ratios over resampled runs, how far another run may read")
    finally:
        provider.stop()
        server.terminate()
        server.wait(timeout=10)
        build.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
