"""The functions' Powertools logger, with the layer's own module loggers writing through it
(docs/deploy.md#reading-logs-metrics-billing-records-and-traces).

Modules log with ``logging.getLogger(__name__)``. Those of ``compactor`` are children of the Powertools logger
of service ``compactor`` and write its JSON lines. Those of ``compactor_aws`` (the ledger, the S3 store, the
batch fan-out) are not: their records went to the root logger, whose handler in Lambda Powertools filters
every record whose logger name contains the service name (its ``SuppressFilter``, meant for the service's
own children), so a ledger, S3 or fan-out warning was written nowhere. :func:`new_logger` gives such
packages the Powertools handler: JSON lines with ``correlation_id`` and the appended keys, at the
function's log level, each written once whatever the service name (:func:`route_package_logs`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aws_lambda_powertools import Logger

SERVICE_ENV = "POWERTOOLS_SERVICE_NAME"
DEFAULT_SERVICE = "compactor"
LAYER_PACKAGES = ("compactor", "compactor_aws")
"""The packages whose module loggers write through the function's Powertools logger."""


def new_logger() -> Logger:
    """The Powertools logger of a handler (service ``POWERTOOLS_SERVICE_NAME``, ``compactor`` by default), with
    :data:`LAYER_PACKAGES`' module loggers writing through its handler."""
    logger = Logger(service=os.environ.get(SERVICE_ENV, DEFAULT_SERVICE))
    route_package_logs(logger)
    return logger


def route_package_logs(logger: Logger, packages: tuple[str, ...] = LAYER_PACKAGES) -> None:
    """Give each of ``packages`` that is not already under ``logger`` its handler and level, and stop its records
    there (``propagate``, as Powertools' ``copy_config_to_registered_loggers`` does): the Lambda runtime's root
    handler filters only the service's name, so with a service other than ``compactor`` (a deployment's own
    ``POWERTOOLS_SERVICE_NAME``) each routed record was written twice, as JSON and again by the root handler.
    A service logger inside one of ``packages`` (``compactor.api``) stops its own records too: they would
    otherwise reach the same handler again through the package."""
    handler = logger.registered_handler
    for name in packages:
        if name == logger.name or name.startswith(logger.name + "."):
            continue  # already a child of the Powertools logger
        if logger.name.startswith(name + "."):
            logging.getLogger(logger.name).propagate = False  # else its records reach ``handler`` again via ``name``
        package = logging.getLogger(name)
        if handler not in package.handlers:
            package.addHandler(handler)
        package.setLevel(logger.log_level)
        package.propagate = False


@contextmanager
def naming(logger: Logger, **keys: Any) -> Iterator[None]:
    """Every line ``logger`` writes meanwhile carries ``keys`` (an S3 object's, a windowed job's: docs/deploy.md);
    they are removed after, so that a warm container's next record or invocation names its own."""
    logger.append_keys(**keys)
    try:
        yield
    finally:
        logger.remove_keys(list(keys))
