"""Canonical identity of a flow (docs/behaviour.md#canonical-identity): content keys, canonical ids, the ``sigma-flow/v1``
encoding with its typed option encoding, and the normalised term.

Canonical ids: ``n0`` is the input node; then, repeatedly, the ready node (all inputs numbered) with
the smallest ``content key + "\\1" + its ordered canonical input ids`` gets the next number. When two
ready nodes tie on that key, a hash of what hangs below each of them decides, so renaming nodes never
changes the encoding (the tie-break only matters for graphs the plain rule cannot order by content).
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Mapping, Sequence
from typing import Any

from ..jsonutil import utf8_len
from .graph import DECISION, INPUT, LLM, AdmittedFlow
from .node_options import MAX_KEEP_NAMES, TYPED_OPTION_KEYS

VERSION = "sigma-flow/v1"

# The backslash first, so that the escapes added after it are not escaped again.
_ESCAPES = (("\\", "\\\\"), ('"', '\\"'), ("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"))


def quote(text: str) -> str:
    """A double-quoted string with ``\\ " \\n \\r \\t`` escaped (``str.replace`` per character present:
    several times faster than ``str.translate`` on a long prompt, docs/performance.md)."""
    for char, escaped in _ESCAPES:
        if char in text:
            text = text.replace(char, escaped)
    return '"' + text + '"'


def lua_number(value: int | float) -> str:
    """Lua 5.3 ``tostring`` of a number: integers plainly, floats ``%.14g`` (``.0`` added when integral)."""
    if isinstance(value, int):
        return str(value)
    text = "%.14g" % value
    if all(ch in "-0123456789" for ch in text):
        text += ".0"
    return text


Memo = dict[int, tuple[Any, str]]


def encode_typed(value: Any, memo: Memo | None = None) -> str:
    """The type-tagged length-delimited encoding: ``s<len>:<bytes>``, ``b1``/``b0``, ``n<num>:``, and
    ``t<count>:`` followed by key/value encodings sorted by encoded key (arrays keyed ``1..n``).
    JSON ``null`` entries are absent, as in a Lua table. ``memo`` (one per admission, while the term is
    not changed) encodes a table that occurs several times in the term once (docs/performance.md)."""
    if isinstance(value, str):
        return f"s{utf8_len(value)}:{value}"
    if isinstance(value, bool):
        return "b1" if value else "b0"
    if isinstance(value, (int, float)):
        return f"n{lua_number(value)}:"
    if memo is not None:
        known = memo.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
    # dict and list before the abstract Mapping/Sequence checks, and string keys, string members and integer
    # members (bool is not ``int`` by type) encoded in place, an ASCII string's length without a call: the
    # same encoding with a fraction of the calls (docs/performance.md)
    if isinstance(value, dict) or isinstance(value, Mapping):
        # a table several keys share (a decision node's question) is found in the memo without a call
        recall = {} if memo is None else memo
        pairs = [(f"s{len(key) if key.isascii() else utf8_len(key)}:{key}" if type(key) is str
                  else encode_typed(key),
                  f"s{len(item) if item.isascii() else utf8_len(item)}:{item}" if type(item) is str
                  else f"n{item}:" if type(item) is int
                  else known[1] if (known := recall.get(id(item))) is not None and known[0] is item
                  else encode_typed(item, memo))
                 for key, item in value.items() if item is not None]
    elif isinstance(value, list) or isinstance(value, Sequence):
        members = _ascii_strings(value) if type(value) is list else None
        if members is not None:  # names, paths: their sorted keys are known, no pairs to build and sort
            indexes, keys = _sorted_positions(members)
            encoding = f"t{members}:" + "".join([f"{key}s{len(item)}:{item}" for key, item in zip(
                keys, [value[index] for index in indexes])])
            if memo is not None:
                memo[id(value)] = (value, encoding)
            return encoding
        pairs = [(f"n{position}:", f"s{len(item) if item.isascii() else utf8_len(item)}:{item}"
                  if type(item) is str else f"n{item}:" if type(item) is int else encode_typed(item, memo))
                 for position, item in enumerate(value, start=1) if item is not None]
    else:
        raise TypeError(f"cannot encode {type(value).__name__} in typed options")
    pairs.sort()
    encoding = f"t{len(pairs)}:" + "".join(key + item for key, item in pairs)
    if memo is not None:
        memo[id(value)] = (value, encoding)  # the value is kept alive, so its id is not reused meanwhile
    return encoding


def _ascii_strings(value: list[Any]) -> int | None:
    """The length of a list whose members are all ASCII strings, else None (their join fails on any other
    member, ``None`` included, and is ASCII only when every member is)."""
    try:
        joined = "".join(value)
    except TypeError:
        return None
    return len(value) if joined.isascii() else None


# By a list's length: the indexes of its members in the order of their encoded keys (``n10:`` sorts before
# ``n2:``) and those keys. Lengths up to _POSITIONS_KEPT are kept: the longest list admission accepts in the
# typed options (keep_names), so at most about 2 MB (all lengths up to 1024 would hold about 42 MB).
_POSITIONS: dict[int, tuple[tuple[int, ...], tuple[str, ...]]] = {}
_POSITIONS_KEPT = MAX_KEEP_NAMES


def _sorted_positions(count: int) -> tuple[tuple[int, ...], tuple[str, ...]]:
    known = _POSITIONS.get(count)
    if known is None:
        order = sorted(range(1, count + 1), key=lambda position: f"n{position}:")
        known = (tuple(position - 1 for position in order), tuple(f"n{position}:" for position in order))
        if count <= _POSITIONS_KEPT:
            _POSITIONS[count] = known
    return known


def typed_options(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The node's options that enter the typed options encoding."""
    return {key: spec[key] for key in TYPED_OPTION_KEYS if key in spec}


def routing_key(routing: Mapping[str, Any], policy_encoding: str, choice_encodings: Mapping[str, str]) -> str:
    """The routing key of a decision-routed llm node: the typed options encoding of its ``routing``
    record as submitted (present keys only, like the typed options), with the routing policy and
    every choice policy replaced by its sigma-pol/v2 encoding and ``min_confidence`` integral as an integer.
    Choice order does not matter; node ids never enter it; any change of a routing field (or of a policy's
    normal form) changes it."""
    record = dict(routing)
    if "min_confidence" in record:  # one number whatever its JSON spelling (1, 1.0), two numbers two keys
        record["min_confidence"] = _json_number(record["min_confidence"])
    record["policy"] = policy_encoding
    record["choices"] = {choice_id: {**choice, "policy": choice_encodings[choice_id]}
                         for choice_id, choice in routing["choices"].items()}
    return encode_typed(record)


def _json_number(value: int | float) -> int | float | str:
    """An integral number as an int (``-0.0`` as 0): JSON has one number type, so a client that writes ``1.0``
    and one that writes ``1`` send the same value. A float that the typed encoding's 14 digits would not tell
    from another (0.30000000000000004 from 0.3) as its shortest exact text, a string where no number can be;
    any other as it is, so its encoding stays what it was."""
    if float(value).is_integer():
        return int(value)
    if float(lua_number(value)) != value:
        return repr(float(value))
    return value


def content_key(kind: str, spec: Mapping[str, Any], policy_encoding: str | None,
                routing: str | None = None, memo: Memo | None = None) -> str:
    """Everything that identifies a node except its id and inputs: ``kind`` followed by the
    `` system=… policy=… template=… routing=… data=…`` parts of its encoding (``routing`` is the
    node's routing key, llm nodes only; ``memo`` as in :func:`encode_typed`)."""
    parts = [kind]
    if kind == LLM:
        parts.append(f" system={quote(spec['system'])}")
    if kind in (LLM, DECISION):
        parts.append(f" policy={policy_encoding}")
    if kind == LLM and "template" in spec:
        parts.append(f" template={quote(spec['template'])}")
    if kind == LLM and routing is not None:
        parts.append(f" routing={routing}")
    options = typed_options(spec)
    if options:
        parts.append(f" data={encode_typed(options, memo)}")
    return "".join(parts)


def node_encoding(key: str, index: int, input_indexes: Sequence[int]) -> str:
    """``(kind n<index>… inputs=[n<a>,n<b>])`` from a content key (no ``inputs`` for the input node)."""
    kind, space, rest = key.partition(" ")
    tail = ")" if kind == INPUT else " inputs=[" + ",".join([f"n{i}" for i in input_indexes]) + "])"
    return f"({kind} n{index}{space if rest else ''}{rest}{tail}"  # one copy of the key's long part


def flow_encoding(node_encodings: Sequence[str]) -> str:
    """``sigma-flow/v1:(`` + node encodings joined by spaces + ``)``."""
    return f"{VERSION}:(" + " ".join(node_encodings) + ")"


def canonical_order(keys: Mapping[str, str], inputs: Mapping[str, Sequence[str]], input_label: str) -> list[str]:
    """Labels in canonical order. ``keys`` maps label → content key, ``inputs`` label → ordered inputs;
    the graph must be acyclic with every node reachable from ``input_label``."""
    readers: dict[str, list[str]] = {label: [] for label in keys}
    waiting: dict[str, int] = {}
    for label, sources in inputs.items():
        distinct = set(sources)
        waiting[label] = len(distinct)
        for source in distinct:
            readers[source].append(label)
    # The tie-break hashes decide only between two ready nodes with the same sort key, which few graphs have:
    # they are computed when a sort key comes a second time (before it enters the heap). Until then the
    # heap's entries differ in their sort keys and never compare the empty placeholder.
    below: dict[str, str] | None = None
    pushed: set[str] = set()
    number: dict[str, int] = {}
    order: list[str] = []
    ready: list[tuple[str, str, str]] = [("", "", input_label)]
    while ready:
        _, _, label = heapq.heappop(ready)
        number[label] = len(order)
        order.append(label)
        for reader in readers[label]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                sort_key = keys[reader] + "\1" + ",".join([f"n{number[s]}" for s in inputs[reader]])
                if below is None and sort_key in pushed:
                    below = _downstream_hashes(keys, inputs, readers)
                    ready = [(key, below[entry], entry) for key, _, entry in ready]
                    heapq.heapify(ready)
                pushed.add(sort_key)
                heapq.heappush(ready, (sort_key, below[reader] if below is not None else "", reader))
    return order


def _downstream_hashes(keys: Mapping[str, str], inputs: Mapping[str, Sequence[str]],
                       readers: Mapping[str, list[str]]) -> dict[str, str]:
    """Per label, a hash of its content key and (recursively) of the nodes reading it, with the
    positions at which they read it. Names never enter the hash."""
    pending = {label: len(set(readers[label])) for label in keys}
    sinks = [label for label, count in pending.items() if count == 0]
    below: dict[str, str] = {}
    while sinks:
        label = sinks.pop()
        reads = sorted(
            below[reader] + ":" + ",".join(str(i) for i, s in enumerate(inputs[reader]) if s == label)
            for reader in set(readers[label]))
        below[label] = hashlib.sha256(("\2".join([keys[label], *reads])).encode("utf-8")).hexdigest()
        for source in set(inputs.get(label, ())):
            pending[source] -= 1
            if pending[source] == 0:
                sinks.append(source)
    return below


def normalized_term(flow: AdmittedFlow) -> list[Any]:
    """``["flow", {n<k>: node}]`` with canonical ids, rewritten inputs and normalised policies."""
    nodes: dict[str, dict[str, Any]] = {}
    for node in flow.nodes:
        rewritten = dict(node.spec)
        if node.policy is not None:
            rewritten["policy"] = node.policy.policy.term
        if node.routing is not None:
            routing = dict(rewritten["routing"])
            routing["policy"] = node.routing.policy.policy.term
            routing["choices"] = {choice_id: {**choice, "policy": node.routing.choices[choice_id].policy.term}
                                  for choice_id, choice in routing["choices"].items()}
            rewritten["routing"] = routing
        if "inputs" in rewritten or node.inputs:
            rewritten["inputs"] = [f"n{i}" for i in node.inputs]
        nodes[node.cid] = rewritten
    return ["flow", nodes]
