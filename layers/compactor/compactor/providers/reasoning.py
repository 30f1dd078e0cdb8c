"""Reasoning models' settings and output budget (docs/providers.md "Reasoning models").

A reasoning model's output limit counts its hidden reasoning as well as its answer: OpenAI's
``max_completion_tokens`` (o-series, gpt-5), Anthropic's and Bedrock's ``max_tokens`` with Claude's thinking.
A call asking for an answer of ``max_tokens`` is therefore sent a limit of ``max_tokens`` plus the offer's
reasoning room (:func:`output_limit`), so that the answer keeps the budget it was given.

The catalog says which offers reason, per offer: ``reasoning_effort`` and ``reasoning_budget_tokens`` (the room).
The transports that speak Chat Completions send the effort as OpenAI's ``reasoning_effort``; for Claude
(``anthropic``, ``bedrock``) the effort turns adaptive thinking on and the budget alone turns extended thinking on
(:func:`claude_thinking`). :func:`refusal` is the catalog's check that the offer's transport can send what it
states (``TransportKind.reasoning``); :func:`thinking_refusal` words a Claude model's refusal of the thinking it
was sent as the catalog change that ends it.
"""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import urlsplit

from compactor.providers.base import BAD_REQUEST, Offer, ProviderError
from compactor.providers.registry import TRANSPORTS

# OpenAI's ``reasoning_effort`` values (``none`` and ``xhigh`` only some models take: the provider says so).
OPENAI_EFFORTS: Final = ("none", "minimal", "low", "medium", "high", "xhigh")
# Anthropic's effort levels (``output_config.effort``; ``xhigh`` and ``max`` only some models take).
CLAUDE_EFFORTS: Final = ("low", "medium", "high", "xhigh", "max")
# Every value the catalog's ``reasoning_effort`` may hold; which of them an offer takes depends on its transport.
EFFORTS: Final = (*OPENAI_EFFORTS, "max")
# The transports whose effort is Anthropic's (adaptive thinking); the others send OpenAI's.
_CLAUDE_WIRES: Final = frozenset({"anthropic", "bedrock"})
# The reasoning room of an offer that states an effort and no ``reasoning_budget_tokens`` (``max`` as ``xhigh``:
# a larger room is stated with ``reasoning_budget_tokens`` beside the effort).
ROOM_BY_EFFORT: Final = {"none": 0, "minimal": 1024, "low": 4096, "medium": 8192, "high": 16384, "xhigh": 32768,
                         "max": 32768}
# The room of an OpenAI model found to be a reasoning model (it refused ``max_tokens``) whose offer states
# neither setting: that of OpenAI's default effort, ``medium``.
DEFAULT_ROOM: Final = ROOM_BY_EFFORT["medium"]
# Anthropic's least thinking budget; the most room any setting may ask for.
MIN_BUDGET_TOKENS: Final = 1024
MAX_BUDGET_TOKENS: Final = 128_000


# Bedrock sends the settings as Claude's thinking, which its other models refuse (every call a
# ValidationException): a model id naming Claude, or an ARN (an application inference profile), takes them.
_BEDROCK_THINKING_MODEL = "anthropic.claude"


def refusal(transport: str, effort: str | None, budget_tokens: int | None, model: str = "",
            base_url: str | None = None) -> str | None:
    """Why an offer of ``transport`` (one of :data:`~compactor.providers.registry.TRANSPORTS`), ``model`` and
    ``base_url`` cannot carry these settings (a catalog error), or ``None``: what the transport cannot send, then
    what the model is known to refuse (:func:`model_refusal`)."""
    if transport == "bedrock" and _BEDROCK_THINKING_MODEL not in model and not model.startswith("arn:"):
        if effort is not None:
            return (f"bedrock sends reasoning_effort as Claude's adaptive thinking (additionalModelRequestFields"
                    f".thinking, outputConfig.effort), which model {model!r} does not take")
        if budget_tokens is not None:
            return (f"bedrock sends reasoning_budget_tokens as Claude's extended thinking "
                    f"(additionalModelRequestFields.thinking), which model {model!r} does not take")
    takes = CLAUDE_EFFORTS if transport in _CLAUDE_WIRES else OPENAI_EFFORTS
    if effort is not None and effort not in takes and "reasoning_effort" in TRANSPORTS[transport].reasoning:
        whose = "Anthropic's effort levels" if transport in _CLAUDE_WIRES else "OpenAI's reasoning_effort"
        return (f"{transport} offers take a reasoning_effort of {', '.join(takes[:-1])} or {takes[-1]} "
                f"({whose}), not {effort!r}")
    sends = TRANSPORTS[transport].reasoning
    for name, value in (("reasoning_effort", effort), ("reasoning_budget_tokens", budget_tokens)):
        if value is None or name in sends:
            continue
        if not sends:
            return f"{transport} offers take no {name}: the transport has no way to send it"
        return (f"{transport} offers take no {name}: the transport cannot send it; "
                f"set {' or '.join(sorted(sends))} instead")
    return model_refusal(transport, effort, budget_tokens, model, base_url)


# What the providers' own references say of named models (docs/providers.md "Reasoning models"), checked when the
# catalog loads so that a setting the model refuses is not first found by a 400 on a call. A model they do not name
# (a newer one, a gateway's alias, an inference profile ARN) is left to the provider, whose refusal
# :func:`thinking_refusal` words as the catalog change.
# Claude, by the version in its id (``claude-opus-4-7``, ``claude-sonnet-4-5-20250929``, ``claude-3-7-sonnet-…``,
# Bedrock's ``us.anthropic.claude-opus-4-6-v1``, a gateway's ``anthropic/claude-opus-4.6``: the minor version after a
# dash or a dot; a trailing 8-digit date is no version). The patterns are strings, compiled by ``re`` when a catalog
# with a reasoning setting is first checked, not when the module is imported.
_CLAUDE_ID = (r"claude-(?:(opus|sonnet|haiku|mythos|fable)-(\d+)(?:[-.](\d{1,2}))?"
              r"|(\d+)(?:[-.](\d{1,2}))?-(opus|sonnet|haiku))(?=$|[-@:.])")
_MYTHOS_PREVIEW = "claude-mythos-preview"
# Anthropic's and Bedrock's "Adaptive thinking" pages: the models before Claude 4.6 (Sonnet 4.5, Opus 4.5 and
# older) take no adaptive thinking; Claude Opus 4.7, Mythos Preview, Mythos 5 and Fable 5 take nothing else (a
# thinking.type "enabled" with budget_tokens is a 400).
_LAST_WITHOUT_ADAPTIVE: Final = (4, 5)
_ADAPTIVE_ONLY: Final = frozenset({("opus", 4, 7), ("mythos", 5, 0), ("fable", 5, 0), ("mythos", "preview")})
# Anthropic's "Effort" page: xhigh is taken by Claude Opus 4.7 and some later models, not by these, which take max.
_NO_XHIGH: Final = frozenset({("opus", 4, 6), ("sonnet", 4, 6), ("mythos", "preview")})
# OpenAI's API reference of reasoning_effort (api.openai.com): gpt-5.1 takes none, low, medium and high; the models
# before it (the o-series, gpt-5 and its variants) take no none, nor xhigh ("supported for all models after
# gpt-5.1-codex-max"); gpt-5-pro takes high only. The same names behind another server are that server's.
_OPENAI_API_HOST = "api.openai.com"
_OPENAI_REFUSES: Final = (  # (model id, the efforts it refuses, why), the first that matches the whole id
    (r"gpt-5-pro(?:-\d{4}-\d{2}-\d{2})?", ("none", "minimal", "low", "medium", "xhigh"), "gpt-5-pro takes high only"),
    (r"gpt-5\.1(?:-\d{4}-\d{2}-\d{2})?", ("minimal", "xhigh"), "gpt-5.1 takes none, low, medium or high"),
    (r"(?:o\d+|gpt-5)(?:-[a-z0-9-]+)?", ("none", "xhigh"), "the models before gpt-5.1 take neither none nor xhigh"),
)


def _claude_model(model: str) -> tuple[str, int, int] | tuple[str, str] | None:
    """``(family, major, minor)`` of a Claude model id, ``("mythos", "preview")``, or None (no Claude id known)."""
    if _MYTHOS_PREVIEW in model:
        return ("mythos", "preview")
    found = re.search(_CLAUDE_ID, model)
    if found is None:
        return None
    family, major, minor, old_major, old_minor, old_family = found.groups()
    if family is None:
        family, major, minor = old_family, old_major, old_minor
    return (family, int(major), int(minor or 0))


def _listed(values: tuple[str, ...]) -> str:
    return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"


def model_refusal(transport: str, effort: str | None, budget_tokens: int | None, model: str,
                  base_url: str | None = None) -> str | None:
    """Why ``model`` is known to refuse these settings as ``transport`` sends them (the providers' references,
    above), or ``None`` (it takes them, or nothing is known of it)."""
    if effort is None and budget_tokens is None:
        return None
    if transport in _CLAUDE_WIRES:
        claude = _claude_model(model)
        if claude is None:
            return None
        if effort is not None and len(claude) == 3 and claude[1:] <= _LAST_WITHOUT_ADAPTIVE:
            return (f"model {model!r} takes no adaptive thinking (Claude 4.5 and earlier think with a budget, if "
                    f"at all), which reasoning_effort turns on: state reasoning_budget_tokens ({MIN_BUDGET_TOKENS} to "
                    f"{MAX_BUDGET_TOKENS}: extended thinking) instead")
        efforts = tuple(level for level in CLAUDE_EFFORTS if not (level == "xhigh" and claude in _NO_XHIGH))
        if effort is None and claude in _ADAPTIVE_ONLY:
            return (f"model {model!r} takes adaptive thinking only, and reasoning_budget_tokens alone sends extended "
                    f"thinking with a budget, which it refuses: state reasoning_effort ({_listed(efforts)}: adaptive "
                    f"thinking) instead")
        if effort is not None and effort not in efforts:
            return f"model {model!r} takes a reasoning_effort of {_listed(efforts)}, not {effort!r}"
        return None
    if effort is None or urlsplit(base_url or "").hostname != _OPENAI_API_HOST:
        return None
    for pattern, refused, why in _OPENAI_REFUSES:
        if re.fullmatch(pattern, model):
            return (f"model {model!r} does not take reasoning_effort {effort!r} on OpenAI's API ({why})"
                    if effort in refused else None)
    return None


def room_of(effort: str | None, budget_tokens: int | None) -> int:
    """The output tokens kept for reasoning by these settings: ``budget_tokens``, else the effort's room
    (:data:`ROOM_BY_EFFORT`), else 0."""
    if budget_tokens is not None:
        return budget_tokens
    return ROOM_BY_EFFORT.get(effort, 0) if effort is not None else 0


# The models found at run time to be reasoning models, by ``(base_url, model)``, whose offers state neither setting:
# in ``_FOUND`` an OpenAI model that refused ``max_tokens`` for ``max_completion_tokens`` (sent the latter from then
# on), in ``_REASONED`` one whose answer reported reasoning (``ChatResponse.reasoned``, read by
# ``openai.parse_chat_completion``: an OpenAI-compatible server's reasoning model that takes ``max_tokens``, which it
# keeps being sent).
# What the container learned of the model from the provider's own answer, whatever request carried it: no caller's
# settings can put a model here, and a caller's content cannot turn a model's reasoning on (docs/providers.md
# "Reasoning models" says where a server could let it), so it is kept for every caller's calls. Its room
# (:data:`DEFAULT_ROOM`) is added to the output limit sent and left out of the context the router checks requests
# against, one and the same :func:`reasoning_room`. A catalog names a few models; a set is cleared if it ever grows
# past _FOUND_MAX. ``found_generation`` changes whenever a set does.
_FOUND: set[tuple[str | None, str]] = set()
_REASONED: set[tuple[str | None, str]] = set()
_FOUND_MAX = 256
_found_generation = 0


def found_to_reason(offer: Offer) -> bool:
    """Whether the offer's model was found at run time to be a reasoning model (:func:`note_reasoning_model`,
    :func:`note_reasoning_answer`)."""
    key = (offer.base_url, offer.model)
    return key in _FOUND or key in _REASONED


def refused_max_tokens(offer: Offer) -> bool:
    """Whether the offer's model refused ``max_tokens`` for ``max_completion_tokens`` (:func:`note_reasoning_model`)."""
    return (offer.base_url, offer.model) in _FOUND


def _remember(found: set[tuple[str | None, str]], offer: Offer) -> None:
    global _found_generation
    key = (offer.base_url, offer.model)
    if key in found:
        return
    if len(found) >= _FOUND_MAX:
        found.clear()
    found.add(key)
    _found_generation += 1


def note_reasoning_model(offer: Offer) -> None:
    """Remember that the offer's model refused ``max_tokens`` (it reasons: the provider said so), for this
    container's calls to it."""
    _remember(_FOUND, offer)


def note_reasoning_answer(offer: Offer) -> None:
    """Remember that the offer's model answered with reasoning (it reasons: the provider's answer said so), for
    this container's calls to it."""
    _remember(_REASONED, offer)


def found_generation() -> int:
    """A number that changes whenever the models found to reason do (for memos of :func:`reasoning_room`)."""
    return _found_generation


def reasoning_room(offer: Offer) -> int:
    """The output tokens kept for the offer's reasoning: :func:`room_of` of its settings, else
    :data:`DEFAULT_ROOM` for a model found to reason at run time (:func:`found_to_reason`), else 0."""
    if offer.reasoning_effort is not None or offer.reasoning_budget_tokens is not None:
        return room_of(offer.reasoning_effort, offer.reasoning_budget_tokens)
    return DEFAULT_ROOM if found_to_reason(offer) else 0


def output_limit(offer: Offer, answer_tokens: int) -> int:
    """The output limit sent for an answer of ``answer_tokens``: that plus the offer's reasoning room
    (:func:`reasoning_room`)."""
    return answer_tokens + reasoning_room(offer)


def claude_thinking(offer: Offer) -> dict[str, Any]:
    """The request fields of a Claude offer's thinking (Anthropic's Messages API names; Bedrock sends ``thinking``
    in ``additionalModelRequestFields`` and the effort as Converse's ``outputConfig.effort``): an effort turns
    adaptive thinking on, ``{"thinking": {"type": "adaptive"}, "output_config": {"effort": E}}`` (adaptive thinking
    takes no budget: a ``reasoning_budget_tokens`` beside the effort is the room alone); a budget alone turns
    extended thinking on, ``{"thinking": {"type": "enabled", "budget_tokens": N}}``; neither, nothing."""
    if offer.reasoning_effort is not None:
        return {"thinking": {"type": "adaptive"}, "output_config": {"effort": offer.reasoning_effort}}
    if offer.reasoning_budget_tokens is not None:
        return {"thinking": {"type": "enabled", "budget_tokens": offer.reasoning_budget_tokens}}
    return {}


# What a Claude model's 400 says when it refuses the thinking it was sent (docs/providers.md "Reasoning models"):
# the models that take adaptive thinking only (those of _ADAPTIVE_ONLY, refused at load, and any the references do
# not name) refuse ``thinking.type: "enabled"``; the models before Claude 4.6 take extended thinking only, and refuse
# ``"adaptive"``.
_REFUSES_ENABLED = "thinking.type.enabled"
_ADAPTIVE = "adaptive"
# What parts the catalog change from the provider's own words in :func:`thinking_refusal`'s message.
PROVIDER_SAID: Final = "the provider said: "


def thinking_refusal(offer: Offer, error: ProviderError) -> ProviderError:
    """``error`` (a call's failure), or, when it is a Claude model's refusal of the thinking the offer's settings
    sent (a ``bad_request`` naming it), a ``bad_request`` whose message says what to change in the catalog."""
    if error.kind != BAD_REQUEST or not claude_thinking(offer):
        return error
    if offer.reasoning_effort is None and _REFUSES_ENABLED in error.message:
        fix = (f"model {offer.model!r} takes adaptive thinking only, not extended thinking with a budget: in the "
               f"catalog, replace \"reasoning_budget_tokens\": {offer.reasoning_budget_tokens} with "
               f"\"reasoning_effort\" ({', '.join(CLAUDE_EFFORTS[:-1])} or {CLAUDE_EFFORTS[-1]}: adaptive thinking) "
               f"in offer {offer.id!r}")
    elif offer.reasoning_effort is not None and _ADAPTIVE in error.message and _REFUSES_ENABLED not in error.message:
        fix = (f"model {offer.model!r} does not take adaptive thinking: in the catalog, replace "
               f"\"reasoning_effort\": \"{offer.reasoning_effort}\" with \"reasoning_budget_tokens\" "
               f"({MIN_BUDGET_TOKENS} to {MAX_BUDGET_TOKENS}: extended thinking) in offer {offer.id!r}")
    else:
        return error
    return ProviderError(BAD_REQUEST, f"{fix}; {PROVIDER_SAID}{error.message}", http_status=error.http_status,
                         retry_after_s=error.retry_after_s)
