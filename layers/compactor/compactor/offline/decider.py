"""The built-in rules decider: answers native decision questions with fixed, documented rules.

For the compaction preset's state (``instructions`` / ``recent_evidence`` / ``fragments``, and the
optional ``later`` block of what happens after the batch) each fragment question gets, in this order
of precedence (docs/offline-offers.md "The decider's rules"):

1. ``keep`` when the evidence cannot be judged (not a string, or unparseable and not an excerpt);
2. ``archive`` (``summarize`` for an excerpt, which cannot be archived) when every action of the
   fragment is superseded later (a later fragment, the recent evidence or the ``later`` actions): the
   same command or tool call run again, a file it read whole read again or rewritten, a file it
   rewrote rewritten again. A text agent's observation inherits the actions of the fragment before it;
3. ``keep`` when it holds the last rewrite of a file that later messages still mention;
4. a failure (a non-zero exit code; without any exit code, an error line): ``keep`` when the fragment
   is under ``ERROR_KEEP_BYTES``, else ``summarize`` (the summarizer keeps error lines first);
5. ``keep`` when the fragment is small (under ``SMALL_EVIDENCE_BYTES``): summarizing it would not
   pay for the summary marker;
6. ``summarize`` otherwise (bulky evidence already acted on).

A fragment's size is its ``bytes`` (what keeping it costs in the transcript), else its evidence's length.

A label the question does not offer is replaced by ``keep`` (or the first criterion). Any other
decision gets a conservative answer for every question: choice ``keep`` (or the first criterion),
score 0, noul 0.5, all with low confidence.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import field
from typing import Any

from compactor.chat import RESULT_ROLES, as_messages
from compactor.jsonutil import loads_within
from compactor.markers import EVIDENCE_MARKER, RECENT_MARKER, fragment_start
from compactor.offline.transcript_reading import (
    Action, content_text, error_lines, fenced_commands, message_actions, return_codes,
    tool_call_action,
)
from compactor.patterns import lazy, pattern
from compactor.records import record

DECIDER_MODEL = "builtin-rules-decider"
SMALL_EVIDENCE_BYTES = 600
# An error output shorter than this is kept verbatim (it may be unresolved); a longer one is summarized,
# and the summarizer keeps its error lines first.
ERROR_KEEP_BYTES = 1500
CONFIDENCE = {"error": 0.9, "superseded": 0.8, "small": 0.85, "bulky": 0.7, "unjudged": 0.3, "fallback": 0.1,
              "live_write": 0.85, "bulky_error": 0.6}

_CD_PREFIX = pattern(r"^cd\s+(\S+)\s*&&\s*")
_PATH_ARG = r"(['\"]?)([^\s'\"|;&<>()]+)"
_WHOLE_READ = pattern(r"^(?:cat(?:\s+-n)?|nl(?:\s+-ba)?|open)\s+" + _PATH_ARG + r"\1\s*$")
_HEREDOC = r"<<-?\s*['\"]?\w+['\"]?"
_FULL_WRITE = pattern(
    r"^cat\s+(?:" + _HEREDOC + r"\s*>\s*" + _PATH_ARG + r"\1|>\s*" + r"(['\"]?)([^\s'\"|;&<>()]+)\3\s*"
    + _HEREDOC + r")"
)
# Tool calls still readable in the visible head/tail of an excerpt (JSON-escaped text).
_JSON_STRING = r'"((?:[^"\\]|\\.)*)"'
_VISIBLE_CALL = pattern(r'"function":\s*\{\s*"arguments":\s*' + _JSON_STRING + r',\s*"name":\s*' + _JSON_STRING)
_VISIBLE_CALL_NAME_FIRST = pattern(
    r'"function":\s*\{\s*"name":\s*' + _JSON_STRING + r',\s*"arguments":\s*' + _JSON_STRING
)
# The fallbacks below are compiled on first use, which a first request may never make
# (docs/performance.md#the-workers-cold-start-sixth-round-issue-11).
_visible_write = lazy(r"cat\s*>\s*['\"]?[^\s'\"|;&<>()]+['\"]?\s*<<-?\s*['\"]?\w+['\"]?")
_visible_create = lazy(r'"command":\s*"create",\s*"path":\s*"([^"]+)"')
_visible_content = lazy(r'"content":\s*' + _JSON_STRING)


@record
class Footprint:
    """What a stretch of evidence did: action keys, files read whole, files fully rewritten."""

    keys: set[str] = field(default_factory=set)
    reads: set[str] = field(default_factory=set)
    rewrites: set[str] = field(default_factory=set)

    def add(self, other: Footprint) -> None:
        self.keys |= other.keys
        self.reads |= other.reads
        self.rewrites |= other.rewrites


def _normalised(path: str, base: str | None) -> str:
    if base and not path.startswith(("/", "~")):
        path = posixpath.join(base, path)
    return posixpath.normpath(path)


def _file_effects(action: Action) -> tuple[str | None, str | None]:
    """``(path read whole, path fully rewritten)`` by ``action``, each None when there is none."""
    arguments = action.arguments
    if action.command is None:
        if isinstance(arguments, dict) and isinstance(arguments.get("path"), str):
            verb = arguments.get("command")
            if verb == "view" and arguments.get("view_range") is None:
                return posixpath.normpath(arguments["path"]), None
            if verb == "create":
                return None, posixpath.normpath(arguments["path"])
        return None, None
    command = action.command.strip()
    base = None
    if (cd := _CD_PREFIX.match(command)) is not None:
        base, command = cd.group(1), command[cd.end():]
    if (read := _WHOLE_READ.match(command)) is not None:
        return _normalised(read.group(2), base), None
    if (write := _FULL_WRITE.match(command)) is not None:
        return None, _normalised(write.group(2) or write.group(4), base)
    return None, None


def footprint_of(actions: list[Action]) -> Footprint:
    """The footprint of a list of actions."""
    footprint = Footprint()
    for action in actions:
        footprint.keys.add(action.key)
        read, rewrite = _file_effects(action)
        if read:
            footprint.reads.add(read)
        if rewrite:
            footprint.rewrites.add(rewrite)
    return footprint


def is_superseded(action: Action, later: Footprint) -> bool:
    """True when ``later`` repeats ``action``, re-reads or rewrites what it read, or rewrites what it wrote."""
    if action.key in later.keys:
        return True
    read, rewrite = _file_effects(action)
    if read and (read in later.reads or read in later.rewrites):
        return True
    return bool(rewrite and rewrite in later.rewrites)


def _unescape(fragment: str) -> str:
    try:
        return json.loads('"' + fragment + '"')
    except ValueError:
        return ""


def visible_actions(excerpt: str) -> list[Action]:
    """Actions still readable in the JSON text of an excerpt (tool calls, fenced commands)."""
    actions: list[Action] = []
    for arguments, name in _VISIBLE_CALL.findall(excerpt):
        if EVIDENCE_MARKER in arguments:  # the cut runs through these arguments: not readable
            continue
        found = tool_call_action({"function": {"name": _unescape(name), "arguments": _unescape(arguments)}})
        actions.extend([found] if found else [])
    for name, arguments in _VISIBLE_CALL_NAME_FIRST.findall(excerpt):
        if EVIDENCE_MARKER in arguments:
            continue
        found = tool_call_action({"function": {"name": _unescape(name), "arguments": _unescape(arguments)}})
        actions.extend([found] if found else [])
    if not actions:
        for content in _visible_content().findall(excerpt):
            actions.extend(Action("bash", command, command) for command in fenced_commands(_unescape(content)))
    if not actions:  # a whole-file write whose long body the excerpt cut: its header is still readable
        visible = excerpt.replace('\\"', '"').replace("\\n", "\n")
        for match in _visible_write().finditer(visible):
            header = match.group(0).strip().strip('"')
            actions.append(Action("bash", header, header))
        for path in _visible_create().findall(visible):
            actions.append(Action("str_replace_editor", {"command": "create", "path": path}))
    return actions


@record
class FragmentView:
    """One fragment as the decider sees it."""

    id: str
    evidence: str
    excerpted: bool
    messages: list[dict[str, Any]] | None
    actions: list[Action]
    # An observation's command, taken from the fragment before it: used to judge this fragment,
    # never counted as something this fragment did.
    inherited_actions: list[Action] = field(default_factory=list)
    size: int = 0  # what keeping the fragment costs (its ``bytes``, else the evidence's length)

    @property
    def judged_actions(self) -> list[Action]:
        return self.actions or self.inherited_actions

    @property
    def judgeable(self) -> bool:
        return self.messages is not None or self.excerpted

    def has_error(self) -> bool:
        """A non-zero exit code; without any exit code, an error line. Exit code 0 means the command
        succeeded even when its output (source code, logs) mentions errors."""
        if self.messages is not None:
            text = "\n".join(content_text(message.get("content")) for message in self.messages)
        else:  # an excerpt: scan its visible JSON text with the line breaks restored
            text = self.evidence.replace("\\n", "\n").replace('\\"', '"')
        codes = return_codes(text)
        if codes:
            return any(code != 0 for code in codes)
        return bool(error_lines(text))

    def latest_writes(self, later: Footprint, mentioned_later: str) -> bool:
        """True when the fragment holds the last rewrite of a file that later messages still mention:
        the file being edited (a scratch script written and run once is not)."""
        rewrites = footprint_of(self.actions).rewrites - later.rewrites
        return any(path.lstrip("./") in mentioned_later for path in rewrites)


def _parse_messages(text: str) -> list[dict[str, Any]] | None:
    try:
        return as_messages(loads_within(text))
    except ValueError:  # jsonutil.NestedTooDeep among them
        return None


def view_fragment(fragment_id: str, evidence: Any, size: Any = None) -> FragmentView:
    """Parse one fragment's evidence (ASCII JSON of its messages, or an excerpt of it); ``size`` is its
    ``bytes`` when the state gives them."""
    if not isinstance(evidence, str):
        return FragmentView(fragment_id, "", False, None, [])
    size = size if type(size) is int and size >= 0 else len(evidence)
    if EVIDENCE_MARKER in evidence:
        return FragmentView(fragment_id, evidence, True, None, visible_actions(evidence), size=size)
    messages = _parse_messages(evidence)
    actions = [action for message in messages or [] for action in message_actions(message)]
    return FragmentView(fragment_id, evidence, False, messages, actions, size=size)


def recent_footprint(entries: list[Any]) -> Footprint:
    """Footprint of the recent evidence (compact JSON strings, possibly ``[excerpt]``-ed)."""
    footprint = Footprint()
    for entry in entries:
        if not isinstance(entry, str):
            continue
        messages = None if RECENT_MARKER in entry else _parse_messages(entry)
        if messages is None:
            actions = visible_actions(entry)
        else:
            actions = [action for message in messages for action in message_actions(message)]
        footprint.add(footprint_of(actions))
    return footprint


def _inherit_observation_actions(views: list[FragmentView]) -> None:
    """Give an action-less fragment the actions of the fragment right before it in the transcript."""
    for previous, current in zip(views, views[1:]):
        before, after = fragment_start(previous.id), fragment_start(current.id)
        if current.actions or before is None or after != before + 1:
            continue
        if current.messages and all(message.get("role") in ("user", *RESULT_ROLES) for message in current.messages):
            current.inherited_actions = list(previous.actions)


def compaction_fragments(state: Any) -> tuple[list[FragmentView], list[Any], dict[str, Any]] | None:
    """The fragment views, recent evidence and ``later`` block of a compaction-shaped state, else None."""
    if not isinstance(state, dict) or not {"instructions", "recent_evidence", "fragments"} <= set(state) or not (
            set(state) <= {"guidance", "instructions", "recent_evidence", "fragments", "later"}):
        return None
    fragments, recent = state["fragments"], state["recent_evidence"]
    later = state.get("later", {})
    if not isinstance(fragments, list) or not isinstance(recent, list) or not isinstance(later, dict):
        return None
    if not all(isinstance(item, dict) and isinstance(item.get("id"), str) for item in fragments):
        return None
    views = [view_fragment(item["id"], item.get("evidence"), item.get("bytes")) for item in fragments]
    return views, recent, later


def _offered(label: str, criteria: Any, confidence: float) -> tuple[str, float]:
    labels = list(criteria) if isinstance(criteria, dict) else []
    if label in labels:
        return label, confidence
    if "keep" in labels:
        return "keep", CONFIDENCE["fallback"]
    return (labels[0] if labels else "keep"), CONFIDENCE["fallback"]


def conservative_answer(question: Any) -> dict[str, Any]:
    """A valid, low-confidence answer that changes nothing: keep / score 0 / noul 0.5.

    Raises ``ValueError`` for a question that is not a choice, score or noul question.
    """
    kind = question.get("type") if isinstance(question, dict) else None
    low = CONFIDENCE["fallback"]
    if kind == "choice":
        choice, confidence = _offered("keep", question.get("criteria"), low)
        return {"type": "choice", "choice": choice, "confidence": min(confidence, low)}
    if kind == "score":
        return {"type": "score", "score": 0, "confidence": low}
    if kind == "noul":
        return {"type": "noul", "noul": 0.5, "confidence": low}
    raise ValueError(f"unsupported question type: {kind!r}")


def classify(view: FragmentView, later: Footprint, mentioned_later: str = "") -> tuple[str, str]:
    """``(label, reason)`` for one fragment, given the footprint of everything after it and the text of
    what later messages mention (names used later, the recent evidence)."""
    if not view.judgeable:
        return "keep", "unjudged"
    actions = view.judged_actions
    if actions and all(is_superseded(action, later) for action in actions):
        return ("summarize" if view.excerpted else "archive"), "superseded"
    if view.latest_writes(later, mentioned_later):
        return "keep", "live_write"
    if view.has_error():
        return ("keep", "error") if view.size < ERROR_KEEP_BYTES else ("summarize", "bulky_error")
    if view.size < SMALL_EVIDENCE_BYTES:
        return "keep", "small"
    return "summarize", "bulky"


def decide(state: Any, questions: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Answers for every question of a native decision (see the module docstring for the rules)."""
    shaped = compaction_fragments(state)
    if shaped is None:
        return {name: conservative_answer(question) for name, question in questions.items()}
    views, recent, after = shaped
    _inherit_observation_actions(views)
    later = recent_footprint(recent)
    actions_after = after.get("later_actions")
    later.add(recent_footprint(actions_after if isinstance(actions_after, list) else []))
    names = after.get("names_used_later")
    mentioned = " ".join([*(n for n in names if isinstance(n, str))] if isinstance(names, list) else [])
    mentioned += " " + " ".join(entry for entry in recent if isinstance(entry, str))
    verdicts: dict[str, tuple[str, str]] = {}
    for view in reversed(views):
        verdicts.setdefault(view.id, classify(view, later, mentioned))
        later.add(footprint_of(view.actions))
    answers: dict[str, dict[str, Any]] = {}
    for name, question in questions.items():
        if name not in verdicts or not isinstance(question, dict) or question.get("type") != "choice":
            answers[name] = conservative_answer(question)
            continue
        label, reason = verdicts[name]
        choice, confidence = _offered(label, question.get("criteria"), CONFIDENCE[reason])
        answers[name] = {"type": "choice", "choice": choice, "confidence": confidence, "reason": reason}
    return answers
