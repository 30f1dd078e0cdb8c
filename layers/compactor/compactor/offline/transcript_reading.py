"""Reading agent transcripts for the built-in offers: actions, observations, exit codes, errors, paths.

Two agent styles are understood:

* tool-calling agents: an assistant message with ``tool_calls`` (function name + JSON arguments),
  followed by ``tool`` messages holding the results (or the deprecated single ``function_call``, answered
  by a ``function`` message);
* text agents (mini-swe-agent v1, SWE-agent): commands in fenced code blocks of the assistant
  content, observations in ``user`` messages shaped ``<returncode>N</returncode><output>…</output>``.

Everything here is a pure, deterministic heuristic over text; nothing is executed or fetched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from compactor.chat import RESULT_ROLES, call_function, content_text
from compactor.jsonutil import dense_dumps, embedded_json
from compactor.patterns import lazy, pattern
from compactor.records import record

# Fenced blocks, each with its language; those of a shell language hold commands (``` with no language is
# SWE-agent's command syntax). Every block is matched, shell or not, so that the closing fence of a code
# excerpt (```python … ```) is never read as the opening of a command block.
# Compiled on first use, not at import (docs/performance.md#request-models-regexes-and-docstrings-issue-11).
_fence = lazy(r"```([\w+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_SHELL_FENCES = frozenset(("bash", "sh", "shell", "console", ""))
_return_code = lazy(r"<returncode>\s*(-?\d+)\s*</returncode>")
_EXIT_STATEMENT = pattern(
    r"(?:^|\n)\s*(?:Process exited with code|Exit code:?|exit code:?|Exit status:?|\[Command finished with exit code)"
    r"\s*(-?\d+)")
_EXIT_STATEMENT_SPAN = 400
_output_tags = lazy(r"</?(?:returncode|output|warning|output_head|output_tail|elided_chars)>")
# Error lines: Python tracebacks and ``XxxError: …`` lines, ``error:``/``ERROR``/``fatal:`` lines,
# compiler-style ``file:line: error``, FAILED/FAIL markers, ``N failed`` test summaries, Go's ``panic:``,
# Rust's ``panicked at`` and the usual shell failures. Source code that merely mentions an exception class
# does not match.
# Lines are only examined where a keyword occurs (found with plain substring search, which is far
# faster than a regex alternation), so the scan stays linear and cheap on large outputs.
_ERROR_KEYWORDS = (
    "Traceback", "Error", "Exception", "error", "ERROR", "fatal", "FAIL", "failed",
    "not found", "No such file", "Permission denied", "Segmentation fault", "panic",
)
_ERROR_LINE = pattern(
    r"[ \t>|]*(?:E[ \t]+)?(?:"
    r"Traceback \(most recent call last\)"
    r"|(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b:"
    r"|(?:---[ \t]+)?(?:error|ERROR|Error|fatal|FAIL|FAILED|panic)\b[ \t]*[:!\]-]"
    r"|FAIL(?:ED)?[ \t]*(?:\S+[ \t]*)?$"
    r"|FAIL[ \t]+\S+[ \t]+(?:\[[^\]\n]*\]|[\d.]+s)[ \t]*$"  # go test: FAIL <package> [build failed] / 0.01s
    r"|\S+:\d+(?::\d+)?:[ \t]*(?:error|fatal)\b"
    r")"
)
_ERROR_CONTEXT = 200
_ERROR_ANYWHERE = pattern(
    r"\bFAILED\b|\b\d+ (?:failed|errors?)\b|command not found|No such file or directory"
    r"|Permission denied|Segmentation fault|\bpanicked at\b"
)
# Path-like tokens: rooted (``/``, ``./``, ``../``, ``~/``) paths, relative paths whose last part is a
# dotted file name, and bare file names with a source-ish suffix. URLs are not paths.
_TOKEN = pattern(r"[^\s'\"`,;:()<>\[\]{}=|*?!$]+")
_ROOTED = pattern(r"(?:~|\.{1,2})?/(?:[\w.@+-]+/)*[\w.@+-]*[A-Za-z][\w.@+-]*")
_RELATIVE_FILE = pattern(r"(?:[\w.@+-]+/)+[\w@+-]*\.[\w.@+-]*[A-Za-z][\w.@+-]*")
_BARE_FILE = pattern(
    r"[\w-]+\.(?:py|pyi|pyx|c|h|cc|cpp|hpp|rs|go|java|kt|js|jsx|ts|tsx|rb|php|sh|cfg|ini"
    r"|toml|yaml|yml|json|md|rst|txt|xml|html|css|sql|lock)"
)
_shell_name = lazy(r"(?:^|_)(?:exec|shell|bash|command|terminal)(?:_|$)", re.IGNORECASE)
_SHELL_TOOLS = frozenset({"bash", "shell", "sh", "terminal", "execute_bash", "run", "run_command", "exec"})


@record(frozen=True)
class Action:
    """One thing the agent did: a shell command, or a tool call with canonical JSON arguments."""

    tool: str
    arguments: Any
    command: str | None = None

    @property
    def key(self) -> str:
        """Identity for repeat detection: the whitespace-normalised command, else name + arguments."""
        if self.command is not None:
            return "cmd:" + " ".join(self.command.split())
        return "call:" + self.tool + ":" + json.dumps(self.arguments, sort_keys=True, separators=(",", ":"))

    def describe(self) -> str:
        """One-line human form: ``$ command`` or ``name(k=v, …)``."""
        if self.command is not None:
            return "$ " + self.command
        if isinstance(self.arguments, dict):
            inner = ", ".join(f"{name}={_scalar_text(value)}" for name, value in self.arguments.items())
        else:
            inner = _scalar_text(self.arguments)
        return f"{self.tool}({inner})"


def _scalar_text(value: Any) -> str:
    return value if isinstance(value, str) else dense_dumps(value)


def tool_call_action(call: Any) -> Action | None:
    """The action of one OpenAI ``tool_calls`` entry (arguments parsed when they are JSON), or None."""
    if not isinstance(call, dict):
        return None
    function = call_function(call) or call  # a function's or a custom tool's call, or a legacy ``function_call``
    name = function.get("name")
    if not isinstance(name, str):
        return None
    raw = function.get("arguments")
    arguments: Any = raw
    if isinstance(raw, str):
        parsed, value = embedded_json(raw)
        arguments = value if parsed else raw
    command = None
    if isinstance(arguments, dict):  # ``command`` (string or argv list), or ``cmd`` as Codex' exec_command
        command = arguments.get("command", arguments.get("cmd"))
        if isinstance(command, list) and all(isinstance(part, str) for part in command):
            command = " ".join(command)
    if isinstance(command, str) and (name in _SHELL_TOOLS or set(arguments) <= {"command", "cmd"}
                                     or _shell_name().search(name)):
        return Action(name, arguments, command.strip())
    return Action(name, arguments)


def fenced_commands(text: str) -> list[str]:
    """Commands in shell-like fenced code blocks of ``text``, in order."""
    if "```" not in text:
        return []
    return [body.strip() for language, body in _fence().findall(text) if language in _SHELL_FENCES and body.strip()]


def message_actions(message: dict[str, Any]) -> list[Action]:
    """Actions of an assistant message: its tool calls, else the commands fenced in its content."""
    if message.get("role") != "assistant":
        return []
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:
        return [action for action in map(tool_call_action, calls) if action is not None]
    legacy = message.get("function_call")  # the deprecated single call, answered by a ``function`` message
    if isinstance(legacy, dict):
        action = tool_call_action(legacy)
        return [] if action is None else [action]
    commands = fenced_commands(content_text(message.get("content")))
    if not commands and isinstance(message.get("action"), str) and message["action"].strip():
        commands = [message["action"].strip()]
    return [Action("bash", command, command) for command in commands]


def prose_text(message: dict[str, Any]) -> str:
    """The content of an assistant message without its fenced command blocks."""
    text = content_text(message.get("content"))
    if "```" not in text:
        return text
    return _fence().sub(lambda block: " " if block.group(1) in _SHELL_FENCES else block.group(0), text)


def is_observation(message: dict[str, Any]) -> bool:
    """True for a tool result (a ``tool`` message, or a legacy ``function`` one) or a text agent's
    ``<returncode>`` observation message."""
    role = message.get("role")
    if role in RESULT_ROLES:
        return True
    return role == "user" and "<returncode>" in content_text(message.get("content"))


def return_codes(text: str) -> list[int]:
    """Every ``<returncode>N</returncode>`` value in ``text``; without one, the exit code a shell tool
    states near the start of its output (``Process exited with code N``, ``Exit code: N``, …)."""
    if "<returncode>" not in text:
        match = _EXIT_STATEMENT.search(text[:_EXIT_STATEMENT_SPAN])
        return [int(match.group(1))] if match else []
    return [int(value) for value in _return_code().findall(text)]


def strip_output_tags(text: str) -> str:
    """``text`` without the ``<returncode>…</returncode>`` block and ``<output>``-style tags."""
    if "<" not in text:
        return text
    return _output_tags().sub(" ", _return_code().sub(" ", text))


def error_lines(text: str) -> list[str]:
    """Distinct error lines of ``text`` (stripped), in order of first appearance (``error_windows``)."""
    return list(dict.fromkeys(line for _, line in error_windows(text)))


def error_windows(text: str) -> Iterator[tuple[int, str]]:
    """``(offset, stripped line)`` of every error line of ``text`` in order, repeats included; ``offset`` is
    where its error keyword is, and the line never spans a newline.

    A line longer than about 400 characters is cut to the ``_ERROR_CONTEXT`` characters around
    the hit (and then only counts through the anywhere-patterns), so the scan stays linear.
    """
    position = 0
    for hit_start, hit_end in _keyword_hits(text):
        if hit_start < position:
            continue
        floor = max(0, hit_start - _ERROR_CONTEXT)
        newline_before = text.rfind("\n", floor, hit_start)
        start = newline_before + 1 if newline_before >= 0 or floor == 0 else floor
        newline_after = text.find("\n", hit_end, hit_end + _ERROR_CONTEXT)
        end = newline_after if newline_after >= 0 else min(len(text), hit_end + _ERROR_CONTEXT)
        line = text[start:end]
        at_line_start = start == 0 or text[start - 1] == "\n"
        if (at_line_start and _ERROR_LINE.match(line)) or _ERROR_ANYWHERE.search(line):
            stripped = line.strip()
            if stripped:
                yield hit_start, stripped
        position = max(end, hit_end)


def _keyword_hits(text: str) -> list[tuple[int, int]]:
    """Sorted ``(start, end)`` spans of every error keyword occurrence in ``text``."""
    hits: list[tuple[int, int]] = []
    for keyword in _ERROR_KEYWORDS:
        index = text.find(keyword)
        while index >= 0:
            hits.append((index, index + len(keyword)))
            index = text.find(keyword, index + len(keyword))
    hits.sort()
    return hits


def _is_path(token: str) -> bool:
    if "/" in token:
        if "//" in token:
            return False
        return bool(_ROOTED.fullmatch(token) or _RELATIVE_FILE.fullmatch(token))
    return "." in token and _BARE_FILE.fullmatch(token) is not None


def paths_in(text: str) -> list[str]:
    """Distinct path-like tokens of ``text``, in order of first appearance (trailing dots dropped)."""
    seen: dict[str, None] = {}
    for raw in _TOKEN.findall(text):
        token = raw.rstrip(".")
        if len(token) >= 3 and token not in seen and _is_path(token):
            seen[token] = None
    return list(seen)


