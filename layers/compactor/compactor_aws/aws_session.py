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
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import boto3
import botocore.loaders
import botocore.session

from compactor.container import PerContainer


class PlainJSONFileLoader(botocore.loaders.JSONFileLoader):
    """botocore's JSON file loader without the ``OrderedDict`` hook (see the module docstring)."""

    def _load_file(self, full_path: str, open_method: Any) -> Any:
        if not os.path.isfile(full_path):
            return None
        with open_method(full_path, "rb") as fp:
            return json.loads(fp.read().decode("utf-8"))


def new_session() -> boto3.Session:
    """A boto3 session as ``boto3.Session()`` makes it, whose data loader reads with :class:`PlainJSONFileLoader`."""
    core = botocore.session.get_session()
    core.get_component("data_loader").file_loader = PlainJSONFileLoader()
    return boto3.Session(botocore_session=core)


SESSION: PerContainer[boto3.Session] = PerContainer(new_session)


_BUILDING = threading.Lock()


def client(service: str, **kwargs: Any) -> Any:
    """``boto3.client(service, **kwargs)`` from the container's session, one build at a time."""
    with _BUILDING:
        return SESSION.get().client(service, **kwargs)
