"""Per-kind option validation of flow nodes (docs/behaviour.md#flow-admission).

Each check returns a problem text (without the node prefix) or ``None``; the admission module adds
the node id and raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..jsonutil import is_finite_number
from .graph import DATA, DECISION, INPUT, LLM, OUTPUT
from ..jsonutil import utf8_len
from .values import MAX_VALUE_BYTES

# Options that make a flow typed and that enter the typed options encoding (docs/behaviour.md#canonical-identity).
TYPED_OPTION_KEYS: Final = (
    "operation", "path", "field", "equals", "questions", "output_format", "skip_empty", "on_error",
    "context", "max_tokens", "timeout_ms", "max_string_bytes", "min_string_bytes", "only_shrink",
    "max_total_string_bytes", "keep_names", "embed_json_text",
)
# Options whose presence on an llm node makes the flow typed.
TYPING_LLM_OPTIONS: Final = frozenset(
    {"output_format", "skip_empty", "on_error", "context", "max_tokens", "timeout_ms", "max_string_bytes",
     "max_total_string_bytes", "keep_names", "embed_json_text"})

OPERATION_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "project": frozenset({"path"}),
    "select": frozenset({"field", "equals"}),
    "overlay": frozenset({"min_string_bytes", "max_string_bytes", "only_shrink"}),
    "union": frozenset(),
}
# (fewest, most) inputs per data operation.
OPERATION_ARITY: Final[Mapping[str, tuple[int, int]]] = {
    "project": (1, 1), "select": (2, 2), "overlay": (2, 4), "union": (1, 32),
}

_BASE_KEYS: Final[Mapping[str, frozenset[str]]] = {
    INPUT: frozenset({"kind", "inputs"}),
    OUTPUT: frozenset({"kind", "inputs"}),
    LLM: frozenset({"kind", "inputs", "system", "policy", "template", "routing", "output_format",
                    "skip_empty", "on_error", "context", "max_tokens", "timeout_ms", "max_string_bytes",
                    "max_total_string_bytes", "keep_names", "embed_json_text"}),
    DECISION: frozenset({"kind", "inputs", "policy", "questions", "skip_empty", "on_error", "timeout_ms",
                         "cache_prefix"}),
    DATA: frozenset({"kind", "inputs", "operation", "on_error"}),
}

MAX_INPUTS: Final = 32
MAX_PATH_STEPS: Final = 16
MAX_NAME_BYTES: Final = 128
MAX_TOKENS_RANGE: Final = (1, 4096)
# JSON-mode llm nodes: the byte bounds of the reply's string values, passed to the transport as data.
REPLY_BYTES_OPTIONS: Final = ("max_string_bytes", "max_total_string_bytes")
# JSON-mode llm nodes: ``keep_names``, names the reply should keep, passed to the transport as data.
MAX_KEEP_NAMES: Final = 256
MAX_KEEP_NAME_BYTES: Final = 512
TIMEOUT_MS_RANGE: Final = (1, 40_000)

# A decision node's ``cache_prefix``: names of the state's leading members that every call of the node's
# kind repeats unchanged, where the provider's prompt cache may end (a hint: no part of the identity).
MAX_CACHE_PREFIX_NAMES: Final = 16

MAX_QUESTIONS: Final = 32
MAX_QUESTION_NAME_BYTES: Final = 64
MAX_TEXT_BYTES: Final = 2000
MAX_CRITERIA: Final = 32

# Decision routing on llm nodes (docs/behaviour.md#decision-routing).
ROUTING_KEYS: Final = frozenset({"policy", "instructions", "choices", "fallback", "min_confidence", "timeout_ms"})
ROUTING_CHOICE_KEYS: Final = frozenset({"description", "policy"})
MIN_ROUTING_CHOICES: Final = 2
MAX_ROUTING_CHOICES: Final = 16
ROUTING_TIMEOUT_MS_RANGE: Final = (100, 10_000)
# No confidence threshold unless the flow sets one (an answer without confidence is still uncertain).
DEFAULT_MIN_CONFIDENCE: Final = 0.0
DEFAULT_ROUTING_TIMEOUT_MS: Final = 2500


def a_kind(kind: str) -> str:
    """``"an llm node"``, ``"a data node"``: the node kind with its article."""
    return f"{'an' if kind in (INPUT, OUTPUT, LLM) else 'a'} {kind} node"


def _is_int_in(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _is_name(value: Any, limit: int) -> bool:
    return isinstance(value, str) and 1 <= utf8_len(value) <= limit


def _known_operation(operation: Any) -> bool:
    return isinstance(operation, str) and operation in OPERATION_KEYS


def unknown_key_problem(kind: str, node: Mapping[str, Any]) -> str | None:
    """Keys the node's kind (and, for data nodes, its operation) does not allow."""
    allowed = _BASE_KEYS[kind]
    if kind == DATA:
        if not _known_operation(node.get("operation")):
            return None  # reported by data_option_problem
        allowed = allowed | OPERATION_KEYS[node["operation"]]
    unknown = sorted(key for key in node if key not in allowed)
    if unknown:
        return f"option {unknown[0]!r} is not allowed on {a_kind(kind)}"
    return None


def common_option_problem(node: Mapping[str, Any]) -> str | None:
    """The options shared by llm, decision and data nodes."""
    if "on_error" in node and node["on_error"] != "input":
        return 'on_error must be "input"'
    if "skip_empty" in node and not isinstance(node["skip_empty"], bool):
        return "skip_empty must be a boolean"
    if "timeout_ms" in node and not _is_int_in(node["timeout_ms"], *TIMEOUT_MS_RANGE):
        return "timeout_ms must be an integer 1–40000"
    return None


def llm_option_problem(node: Mapping[str, Any]) -> str | None:
    """llm nodes: ``system``, ``template``, ``output_format``, ``context``, ``max_tokens``, ``embed_json_text``,
    the reply's string bounds and names to keep, ``routing``."""
    if not isinstance(node.get("system"), str):
        return "system must be a string"
    if "template" in node and not isinstance(node["template"], str):
        return "template must be a string"
    if "output_format" in node and node["output_format"] != "json":
        return 'output_format must be "json"'
    if "context" in node and node["context"] != "inputs":
        return 'context must be "inputs"'
    if "max_tokens" in node and not _is_int_in(node["max_tokens"], *MAX_TOKENS_RANGE):
        return "max_tokens must be an integer 1–4096"
    if "embed_json_text" in node and not isinstance(node["embed_json_text"], bool):
        return "embed_json_text must be a boolean"
    for key in REPLY_BYTES_OPTIONS:
        if key in node and not _is_int_in(node[key], 1, MAX_VALUE_BYTES):
            return f"{key} must be an integer 1–{MAX_VALUE_BYTES}"
        if key in node and node.get("output_format") != "json":
            return f'{key} needs output_format "json"'
    if "keep_names" in node:
        names = node["keep_names"]
        if not (isinstance(names, list) and 1 <= len(names) <= MAX_KEEP_NAMES
                and all(_is_name(name, MAX_KEEP_NAME_BYTES) for name in names)):
            return f"keep_names must be 1–{MAX_KEEP_NAMES} strings of 1–{MAX_KEEP_NAME_BYTES} bytes"
        if node.get("output_format") != "json":
            return 'keep_names needs output_format "json"'
    if "routing" in node:
        return routing_problem(node["routing"])
    return None


def routing_problem(routing: Any) -> str | None:
    """The ``routing`` record of a decision-routed llm node (docs/behaviour.md#decision-routing).

    Keys: ``policy`` (the routing decision's policy, decisions protocol), ``instructions`` (1–2000
    bytes), ``choices`` (2–16 ids of 1–64 bytes, each ``{description, policy}`` with a 1–2000-byte
    description) and ``fallback`` (a choice id) are required; ``min_confidence`` (finite, 0–1,
    default :data:`DEFAULT_MIN_CONFIDENCE`) and ``timeout_ms`` (integer 100–10000, default
    :data:`DEFAULT_ROUTING_TIMEOUT_MS`) are optional. Unknown keys are rejected, in the record and in
    every choice. Policies are admitted afterwards, with the node's. The node's own ``policy`` stays
    required and part of its identity, but a routed node's generation always runs under a choice's
    policy. Routing alone does not make a flow typed (it is not in the docs/behaviour.md#flow-admission list).
    """
    if not isinstance(routing, dict):
        return "routing must be an object"
    unknown = sorted(key for key in routing if key not in ROUTING_KEYS)
    if unknown:
        return f"option {unknown[0]!r} is not allowed in routing"
    if "policy" not in routing:
        return "routing needs a policy"
    if not _is_description(routing.get("instructions")):
        return "routing instructions must be 1–2000 bytes"
    choices = routing.get("choices")
    if not isinstance(choices, dict) or not MIN_ROUTING_CHOICES <= len(choices) <= MAX_ROUTING_CHOICES:
        return f"routing choices must be an object with {MIN_ROUTING_CHOICES}–{MAX_ROUTING_CHOICES} choices"
    for choice_id, choice in choices.items():
        if not _is_name(choice_id, MAX_QUESTION_NAME_BYTES):
            return "routing choice ids must be 1–64 bytes"
        problem = _routing_choice_problem(choice)
        if problem:
            return f"routing choice {choice_id!r}: {problem}"
    if not (isinstance(routing.get("fallback"), str) and routing["fallback"] in choices):
        return "routing fallback must name a choice"
    if "min_confidence" in routing and not _is_unit_number(routing["min_confidence"]):
        return "routing min_confidence must be a finite number 0–1"
    if "timeout_ms" in routing and not _is_int_in(routing["timeout_ms"], *ROUTING_TIMEOUT_MS_RANGE):
        return "routing timeout_ms must be an integer 100–10000"
    return None


def _routing_choice_problem(choice: Any) -> str | None:
    if not isinstance(choice, dict):
        return "a choice must be an object"
    unknown = sorted(key for key in choice if key not in ROUTING_CHOICE_KEYS)
    if unknown:
        return f"option {unknown[0]!r} is not allowed in a routing choice"
    if not _is_description(choice.get("description")):
        return "description must be 1–2000 bytes"
    if "policy" not in choice:
        return "a choice needs a policy"
    return None


def _is_unit_number(value: Any) -> bool:
    return is_finite_number(value) and 0 <= value <= 1


def data_option_problem(node: Mapping[str, Any]) -> str | None:
    """data nodes: the operation and its options."""
    operation = node.get("operation")
    if not _known_operation(operation):
        return "operation must be one of project, select, overlay, union"
    if operation == "project":
        path = node.get("path")
        if (not isinstance(path, list) or not 1 <= len(path) <= MAX_PATH_STEPS
                or not all(_is_name(step, MAX_NAME_BYTES) for step in path)):
            return "path must be 1–16 strings of 1–128 bytes"
    elif operation == "select":
        for key in ("field", "equals"):
            if not _is_name(node.get(key), MAX_NAME_BYTES):
                return f"{key} must be a string of 1–128 bytes"
    elif operation == "overlay":
        return _overlay_option_problem(node)
    return None


def _overlay_option_problem(node: Mapping[str, Any]) -> str | None:
    if "only_shrink" in node and not isinstance(node["only_shrink"], bool):
        return "only_shrink must be a boolean"
    upper = MAX_VALUE_BYTES
    if "max_string_bytes" in node:
        if not _is_int_in(node["max_string_bytes"], 1, MAX_VALUE_BYTES):
            return f"max_string_bytes must be an integer 1–{MAX_VALUE_BYTES}"
        upper = node["max_string_bytes"]
    if "min_string_bytes" in node and not _is_int_in(node["min_string_bytes"], 1, upper):
        return f"min_string_bytes must be an integer 1–{upper}"
    return None


def arity_problem(kind: str, node: Mapping[str, Any], count: int) -> str | None:
    """Input counts: output exactly 1; model and data nodes 1–32, data operations their own arity."""
    if kind == INPUT:
        return "an input node takes no inputs" if count else None
    if kind == OUTPUT:
        return None if count == 1 else "an output node takes exactly 1 input"
    if not 1 <= count <= MAX_INPUTS:
        return f"{a_kind(kind)} takes 1–{MAX_INPUTS} inputs"
    if kind == DATA:
        operation = node["operation"]
        low, high = OPERATION_ARITY[operation]
        if not low <= count <= high:
            wanted = str(low) if low == high else f"{low}–{high}"
            return f"{operation} takes {wanted} inputs, got {count}"
    return None


def decision_option_problem(node: Mapping[str, Any]) -> str | None:
    """decision nodes: ``cache_prefix`` (1–16 distinct names of 1–128 bytes), then the questions."""
    names = node.get("cache_prefix")
    if "cache_prefix" in node and not (
            isinstance(names, list) and 1 <= len(names) <= MAX_CACHE_PREFIX_NAMES
            and all(_is_name(name, MAX_NAME_BYTES) for name in names) and len(set(names)) == len(names)):
        return f"cache_prefix must be an array of 1–{MAX_CACHE_PREFIX_NAMES} distinct names of 1–{MAX_NAME_BYTES} bytes"
    return question_problem(node.get("questions"))


def question_problem(questions: Any) -> str | None:
    """Core question rules (byte-measured); the host's decision validation runs afterwards."""
    if not isinstance(questions, dict) or not 1 <= len(questions) <= MAX_QUESTIONS:
        return "questions must be an object with 1–32 questions"
    checked: set[int] = set()  # a question object several names share is checked once
    for name, question in questions.items():
        if not _is_name(name, MAX_QUESTION_NAME_BYTES):
            return "question names must be 1–64 bytes"
        if id(question) in checked:
            continue
        if not isinstance(question, dict):
            return f"question {name!r} must be an object"
        problem = _one_question_problem(question)
        if problem:
            return f"question {name!r}: {problem}"
        checked.add(id(question))
    return None


def _is_description(value: Any) -> bool:
    return isinstance(value, str) and 1 <= utf8_len(value) <= MAX_TEXT_BYTES


def _one_question_problem(question: Mapping[str, Any]) -> str | None:
    if not _is_description(question.get("instructions")):
        return "instructions must be 1–2000 bytes"
    kind, criteria = question.get("type"), question.get("criteria")
    if kind == "choice":
        if not isinstance(criteria, dict) or not 1 <= len(criteria) <= MAX_CRITERIA:
            return "choice criteria must be an object with 1–32 entries"
        if not all(_is_name(label, MAX_QUESTION_NAME_BYTES) for label in criteria):
            return "choice names must be 1–64 bytes"
        if not all(_is_description(text) for text in criteria.values()):
            return "criterion descriptions must be 1–2000 bytes"
    elif kind == "score":
        if (not isinstance(criteria, list) or not 2 <= len(criteria) <= MAX_CRITERIA
                or not all(_is_description(text) for text in criteria)):
            return "score criteria must be 2–32 non-empty strings of at most 2000 bytes"
    elif kind == "noul":
        if criteria is not None and (not isinstance(criteria, dict) or set(criteria) != {"true", "false"}
                                     or not all(_is_description(text) for text in criteria.values())):
            return "noul criteria must be absent or describe exactly true and false"
    else:
        return "type must be choice, score or noul"
    return None
