"""The extractive summarizer on hand-made items and on real transcripts."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from compactor.jsonutil import dense_dumps, strict_loads
from compactor.offline.summarizer import (
    _error_positions, split_rendered, summarize_conversation, summarize_item, summarize_items, summarize_json_request,
)
from compactor.offline.text_fit import utf8_len
from compactor.offline.transcript_reading import error_lines, fenced_commands, prose_text

from .corpus import TRANSCRIPTS, load_messages, units


def tool_unit(command: str, output: str, returncode: int = 0, note: str = "") -> str:
    arguments = json.dumps({"command": command})
    return dense_dumps([
        {"role": "assistant", "content": note,
         "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "call_1",
         "content": f"<returncode>{returncode}</returncode>\n<output>\n{output}</output>"},
    ])


def test_tool_call_summary_leads_with_the_call_and_its_exit_code_then_errors() -> None:
    output = "collecting ...\n" + "".join(f"tests/test_mod.py::test_{i} PASSED\n" for i in range(200))
    output += "Traceback (most recent call last):\n  File \"src/pkg/mod.py\", line 3\nValueError: bad value\n"
    output += "FAILED tests/test_mod.py::test_x - ValueError\n== 1 failed, 200 passed in 0.5s ==\n"
    item = tool_unit("cd /repo && python -m pytest tests/test_mod.py -x", output, returncode=1,
                     note="Run the tests.")
    summary = summarize_item(item, 256)
    assert utf8_len(summary) <= 256
    lines = summary.split("\n")
    assert "$ cd /repo && python -m pytest tests/test_mod.py -x → exit 1" in lines
    for error in ("ValueError: bad value", "FAILED tests/test_mod.py::test_x - ValueError"):
        assert error in lines  # error lines come before routine output
    assert "== 1 failed, 200 passed in 0.5s ==" in lines


def test_text_agent_units_are_understood() -> None:
    action = dense_dumps({"role": "assistant",
                            "content": "THOUGHT: look at the config.\n\n```bash\ncat /testbed/pkg/config.py\n```"})
    observation = dense_dumps({"role": "user",
                                 "content": "<returncode>2</returncode>\n<output>\ncat: /testbed/pkg/config.py: "
                                            "No such file or directory\n</output>"})
    action_summary = summarize_item(action, 256)
    assert action_summary.split("\n") == ["THOUGHT: look at the config.", "$ cat /testbed/pkg/config.py"]
    observation_summary = summarize_item(observation, 256)
    assert observation_summary == "exit 2\ncat: /testbed/pkg/config.py: No such file or directory"


def test_a_code_excerpt_fenced_before_the_command_is_not_read_as_a_command() -> None:
    # A text agent quotes code (```python … ```) before its command block: the excerpt's closing fence
    # was paired with the command block's opening one, so the prose between them showed as `$ …` and the
    # real command was lost from the summary.
    content = ("THOUGHT: the drawing happens in to_raster:\n\n```python\n   102\t    def to_raster(self):\n"
               "   116\t        image = FT2Image(w, h)\n```\n\nI missed these lines before.\n\n"
               "```bash\nnl -ba lib/matplotlib/_mathtext.py | sed -n '102,130p'\n```")
    message = {"role": "assistant", "content": content}
    assert fenced_commands(content) == ["nl -ba lib/matplotlib/_mathtext.py | sed -n '102,130p'"]
    assert "def to_raster(self)" in prose_text(message) and "sed -n" not in prose_text(message)
    lines = summarize_item(dense_dumps(message), 256).split("\n")
    assert "$ nl -ba lib/matplotlib/_mathtext.py | sed -n '102,130p'" in lines
    assert not any(line.startswith("$ I missed") for line in lines)


def test_a_long_error_line_is_an_error_line() -> None:
    # The error scan cuts a line over ~400 characters to the text around its keyword; the summarizer then did not
    # recognise the whole line as an error, and the chained traceback's last exception (the one the agent has to
    # fix) lost its place to the frames' `File ...` lines.
    value = "'" + "x" * 600 + "'"
    output = ("Traceback (most recent call last):\n"
              + "".join(f'  File "/testbed/pkg/mod_{i}.py", line {i}, in f_{i}\n    g_{i}()\n' for i in range(6))
              + f"pkg.errors.ParseError: parsing '<string>' failed: SyntaxError({value})\n")
    summary = summarize_item(tool_unit("python -m pkg.check", output, returncode=1), 256)
    assert utf8_len(summary) <= 256
    assert any(line.startswith("pkg.errors.ParseError: parsing '<string>' failed: SyntaxError('xxx")
               for line in summary.split("\n")), summary


def _python_calls(run: Callable[[], object]) -> int:
    """How many Python and builtin calls ``run`` makes: a count of work that does not depend on the machine."""
    count = 0

    def profile(frame: object, event: str, arg: object) -> None:
        nonlocal count
        count += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count


def test_many_long_error_lines_take_work_linear_in_their_number() -> None:
    # Each long error line was looked for among the cuts of every other line: 1 MB of 2,000 long `ERROR:` lines
    # took 0.6-1.5 s, now 0.03 s. A cut now goes to the line it was cut from (docs/performance.md).
    def item(count: int) -> str:
        return tool_unit("make", "".join(f"ERROR: job {i} failed: " + f"{i:x}-" * 100 + "\n" for i in range(count)), 1)

    small, large = item(200), item(400)
    calls = [_python_calls(lambda text=text: summarize_item(text, 512)) for text in (small, large)]
    assert calls[1] < 2.5 * calls[0], calls  # twice the lines, about twice the work (it was 3.2 times)
    assert "ERROR: job 0 failed: 0-0-0-" in summarize_item(large, 512)


@pytest.mark.parametrize("output", [
    "ERROR: " + "x" * 600,
    "start\n" + ("pkg.errors.ParseError: failed: SyntaxError('" + "y" * 500 + "')\n") * 3 + "done",
    "z" * 300 + " FAILED " + "z" * 300 + "\nnot an error\n  error: short one\n" + "q" * 250 + " Error: late " + "q" * 400,
    "a\n" + "".join(f"line {i} " + "w" * (150 * (i % 5)) + f" FAILED {i} " + "w" * 200 + "\n" for i in range(12)),
])
def test_error_lines_are_the_lines_whole_or_holding_a_cut_error_line(output: str) -> None:
    # The error lines found by offset are those found by looking for each cut error line in every line.
    raw = [line for line in output.splitlines() if line.strip()]
    errors = set(error_lines("\n".join(raw)))
    cut = errors.difference(line.strip() for line in raw)
    expected = {i for i, line in enumerate(raw) if line.strip() in errors or any(part in line for part in cut)}
    assert expected and _error_positions(raw) == expected


def test_plain_text_keeps_its_salient_lines_in_order() -> None:
    text = "start of a plain note.\n" + "filler line\n" * 300 + "see src/app/main.py\nend of the note."
    summary = summarize_item(text, 128)
    assert utf8_len(summary) <= 128
    assert summary.split("\n") == ["start of a plain note.", "see src/app/main.py", "end of the note."]


def test_summaries_are_strictly_shorter_even_when_the_budget_is_larger() -> None:
    for text in ("hello world", '[{"role":"assistant","content":"ok"}]', "é" * 40):
        summary = summarize_item(text, 1000)
        assert 0 < utf8_len(summary) < utf8_len(text)
    assert summarize_item("x", 100) == ""  # a 1-byte item cannot shrink into a non-empty summary


def test_non_ascii_text_is_never_cut_inside_a_character() -> None:
    output = "".join(f"ligne {i}: données été 漢字 🙂 résultat\n" for i in range(300))
    item = tool_unit("python démo.py", output)
    for budget in range(20, 300, 7):
        summary = summarize_item(item, budget)
        assert utf8_len(summary) <= budget
        assert "\ufffd" not in summary
        summary.encode("utf-8").decode("utf-8")


def test_json_reply_maps_exactly_the_given_ids() -> None:
    items = {"fragment_2": tool_unit("ls", "a\nb\n" * 200), "fragment_5": "plain text " * 50,
             "fragment_9": {"not": "a string"}}
    reply = strict_loads(summarize_json_request(dense_dumps(items), 128))
    assert set(reply) == set(items)
    assert all(isinstance(value, str) and utf8_len(value) <= 128 for value in reply.values())


def test_max_tokens_bounds_the_whole_reply() -> None:
    items = {f"fragment_{i}": tool_unit(f"cat file_{i}.py", "".join(f"code_line_{j} = {j}\n" for j in range(500)))
             for i in range(8)}
    names = frozenset(f"code_line_{j}" for j in range(500))
    reply = summarize_json_request(dense_dumps(items), 1000, max_output_bytes=512 * 4, names=names)
    assert utf8_len(reply) <= 512 * 4
    assert set(strict_loads(reply)) == set(items)
    unbounded = summarize_items(items, 1000, names=names)
    assert max(map(utf8_len, unbounded.values())) > 300


def test_the_batch_total_goes_to_the_salient_items_first() -> None:
    routine = tool_unit("ls", "".join(f"file_{i}\n" for i in range(300)))
    failing = tool_unit("make test", "".join(f"ok {i}\n" for i in range(100))
                        + "".join(f"src/mod_{i}.c:{i}: error: bad thing {i}\n" for i in range(20)), returncode=2)
    summaries = summarize_items({"a": routine, "b": failing}, 600, total=700)
    assert utf8_len(summaries["a"]) + utf8_len(summaries["b"]) <= 700
    assert utf8_len(summaries["b"]) > 2 * utf8_len(summaries["a"])
    assert summaries["b"].count("error: bad thing") >= 10 and summaries["a"].startswith("$ ls → exit 0")


def test_names_used_later_are_kept() -> None:
    output = "".join(f"def helper_{i}(x):\n    return x\n" for i in range(200))
    item = tool_unit("cat src/helpers.py", output)
    summary = summarize_item(item, 256, names=frozenset({"helper_77", "helper_150"}))
    assert "def helper_77(x):" in summary and "def helper_150(x):" in summary


def test_each_name_is_shown_once_per_batch_and_the_densest_lines_first() -> None:
    listing = "".join(f"filler {i} with nothing to say at all\n" for i in range(50))
    first = tool_unit("cat src/a.py", listing + "alpha_one = beta_two + gamma_three\nuse(alpha_one)\n")
    second = tool_unit("cat src/b.py", listing + "print(alpha_one)\ndelta_four = 1\n")
    names = frozenset({"alpha_one", "beta_two", "gamma_three", "delta_four"})
    summaries = summarize_items({"a": first, "b": second}, 256, names=names)
    assert "alpha_one = beta_two + gamma_three" in summaries["a"] and "use(alpha_one)" not in summaries["a"]
    assert "delta_four = 1" in summaries["b"] and "print(alpha_one)" not in summaries["b"]


def test_a_script_shows_its_start_and_the_named_lines_of_its_body() -> None:
    script = "python - <<'PY'\nimport sys\n" + "x = 1\n" * 40 + "result = compute_total(x)\nPY"
    summary = summarize_item(tool_unit(script, "ok\n"), 256, names=frozenset({"compute_total"}))
    lines = summary.split("\n")
    assert lines[0].startswith("$ python - <<'PY' import sys x = 1") and lines[0].endswith("(44 lines) → exit 0")
    assert "result = compute_total(x)" in lines


def test_an_edit_call_is_shown_short_and_its_new_text_judged_by_line() -> None:
    new_text = "def keep_me():\n    return helper_value\n" + "# routine comment\n" * 30
    arguments = json.dumps({"command": "str_replace", "path": "src/mod.py", "old_str": "pass", "new_str": new_text})
    item = dense_dumps([
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "str_replace_editor", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "c", "content": "The file src/mod.py has been edited."},
    ])
    summary = summarize_item(item, 300, names=frozenset({"helper_value"}))
    assert summary.startswith("str_replace_editor(command=str_replace, path=src/mod.py, old_str=pass, new_str=def keep_me(): …)")
    assert "return helper_value" in summary and "routine comment" not in summary


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"a": 1, "a": 2}'])
def test_unparseable_user_content_is_rejected(content: str) -> None:
    with pytest.raises(ValueError):
        summarize_json_request(content, 128)


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda path: path.stem)
@pytest.mark.parametrize("budget", [128, 256, 1000])
def test_corpus_batches(path: Path, budget: int) -> None:
    all_units = units(load_messages(path))
    for start in range(0, len(all_units), 8):
        items = {unit_id: dense_dumps(messages) for unit_id, messages in all_units[start:start + 8]}
        reply_text = summarize_json_request(dense_dumps(items), budget)
        reply = strict_loads(reply_text)
        assert list(reply) == list(items)
        for unit_id, summary in reply.items():
            original = utf8_len(items[unit_id])
            assert utf8_len(summary) <= budget
            assert utf8_len(summary) < original
            assert summary or original <= 1
            assert "\ufffd" not in summary
        assert summarize_json_request(dense_dumps(items), budget) == reply_text  # deterministic


def test_corpus_tool_call_summaries_name_the_command() -> None:
    messages = load_messages(next(path for path in TRANSCRIPTS if "pydicom-901" in path.name))
    tool_units = [messages for _, messages in units(messages) if messages[0].get("tool_calls")]
    for unit_messages in tool_units[:10]:
        command = json.loads(unit_messages[0]["tool_calls"][0]["function"]["arguments"])["command"]
        summary = summarize_item(dense_dumps(unit_messages), 256)
        call = next(line for line in summary.split("\n") if line.startswith("$ "))
        assert call.startswith("$ " + " ".join(command.split())[:20]) and " → exit " in call


def render(messages: list[dict]) -> str:
    """The legacy seal rendering: ``<role>: <content>`` lines."""
    return "\n".join(f"{message['role']}: {message.get('content')}" for message in messages)


def test_seal_digest_keeps_task_commands_errors_and_files() -> None:
    rendered = render([
        {"role": "user", "content": "Fix the crash in src/app/main.py when the config is empty."},
        {"role": "assistant", "content": "I will run it first.\n```bash\npython src/app/main.py\n```"},
        {"role": "user", "content": "<returncode>1</returncode><output>" + "loading plugin\n" * 200
                                    + "Traceback (most recent call last):\nKeyError: 'name'\n</output>"},
        {"role": "assistant", "content": "The root cause is a missing default. Next I need to patch load()."},
    ])
    assert [role for role, _ in split_rendered(rendered)] == ["user", "assistant", "user", "assistant"]
    digest = summarize_conversation(rendered, 2048)
    assert digest.startswith("Extractive digest of 4 messages (built-in summarizer, no model).")
    assert "task: Fix the crash in src/app/main.py" in digest
    assert "$ python src/app/main.py (exit 1)" in digest
    assert "KeyError: 'name'" in digest
    assert "files: src/app/main.py" in digest
    assert "The root cause is a missing default." in digest


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda path: path.stem)
def test_seal_digest_of_corpus_is_bounded(path: Path) -> None:
    rendered = render(load_messages(path))
    digest = summarize_conversation(rendered, 512 * 4)
    assert 0 < utf8_len(digest) <= 2048
    assert digest == summarize_conversation(rendered, 512 * 4)


def test_a_long_call_is_cut_but_keeps_its_exit_code() -> None:
    command = "python -c \"" + "x = 1; " * 60 + "\""
    summary = summarize_item(tool_unit(command, "ok\n", returncode=3), 128)
    call = next(line for line in summary.split("\n") if line.startswith("$ python -c"))
    assert call.endswith("… → exit 3") and utf8_len(summary) <= 128


def test_exit_statements_of_other_shell_tools_count() -> None:
    item = dense_dumps([
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "exec_command", "arguments": '{"cmd": "go test ./..."}'}}]},
        {"role": "tool", "tool_call_id": "c", "content": "Chunk ID: 1\nProcess exited with code 1\nOutput:\n"
                                                         "--- FAIL: TestSync (0.01s)\nFAIL\n" + "ok pkg\n" * 200},
    ])
    summary = summarize_item(item, 256)
    assert "$ go test ./... → exit 1" in summary.split("\n") and "--- FAIL: TestSync (0.01s)" in summary


def test_a_second_seal_carries_the_first_forward_and_reads_tool_calls() -> None:
    from compactor.compaction.seal import SEAL_MARKER, render_aged

    first = summarize_conversation(render([
        {"role": "user", "content": "Make parse_header accept empty input (src/app/core.py)."},
        {"role": "assistant", "content": "Reading it.\n```bash\ncat src/app/core.py\n```"},
        {"role": "user", "content": "<returncode>0</returncode><output>def parse_header(x): ...\n" + "# filler\n" * 300
                                    + "</output>"},
    ]), 1024)
    assert first.split("\n")[1] == "task: Make parse_header accept empty input (src/app/core.py)."
    aged = [{"role": "system", "content": SEAL_MARKER + first},
            {"role": "user", "content": "Also add a test, please."},
            {"role": "assistant", "content": "Running the tests.", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "bash",
                                                             "arguments": '{"command": "pytest -q tests"}'}}]},
            {"role": "tool", "tool_call_id": "c",
             "content": "Process exited with code 1\n" + "ok\n" * 300 + "FAILED tests/test_core.py::test_empty"}]
    second = summarize_conversation(render_aged(aged), 1024)
    lines = second.split("\n")
    assert "task: Make parse_header accept empty input (src/app/core.py)." in lines  # the task of turn 1 survives
    assert any(line.startswith("earlier: ") and "cat src/app/core.py (exit 0)" in line for line in lines)
    assert "commands: $ pytest -q tests (exit 1)" in lines
    assert any("FAILED tests/test_core.py::test_empty" in line for line in lines if line.startswith("errors: "))
    assert "requests: Also add a test, please." in lines


def test_every_earlier_seal_is_carried_forward_not_only_the_last() -> None:
    """A conversation sealed before its seals folded the earlier summary in (each seal then added one more) holds
    several earlier seals in a row; once they are sealed with the middle, the built-in seal kept the last one's text
    as ``earlier:`` and dropped the others but for a ``task:`` line. A tool's output or an assistant's text that starts
    with the marker (a summary read back from a file) is no earlier seal: it was taken for one."""
    from compactor.compaction.seal import SEAL_MARKER, render_aged

    aged = [{"role": "system", "content": SEAL_MARKER + "task: Build the ALPHA parser.\nstate: FIRST-FACT lexer done"},
            {"role": "system", "content": SEAL_MARKER + "state: SECOND-FACT tests pass"},
            {"role": "user", "content": "Now the README."},
            {"role": "assistant", "content": "Reading the old summary.", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat s.md"}'}}]},
            {"role": "tool", "tool_call_id": "c", "content": SEAL_MARKER + "state: STALE-FACT\nError: disk full"}]
    lines = summarize_conversation(render_aged(aged), 2048).split("\n")
    assert "task: Build the ALPHA parser." in lines
    carried = [line for line in lines if line.startswith("earlier: ")]
    assert len(carried) == 1 and "FIRST-FACT" in carried[0] and "SECOND-FACT" in carried[0], lines
    assert "STALE-FACT" not in carried[0] and any("Error: disk full" in line for line in lines if
                                                  line.startswith("errors: "))


def test_go_package_failures_are_error_lines() -> None:
    output = "".join(f"ok  \texample.com/pkg/m{i}\t0.01s\n" for i in range(100))
    output += "FAIL\texample.com/pkg/store [setup failed]\nFAIL\texample.com/pkg/sync\t0.013s\n"
    summary = summarize_item(tool_unit("go test ./...", output, returncode=1), 200)
    assert "FAIL example.com/pkg/store [setup failed]" in summary and "FAIL example.com/pkg/sync 0.013s" in summary


def test_go_and_rust_panics_are_error_lines() -> None:
    # A Go test that panics prints `--- FAIL` and `FAIL` lines and, between them, the panic that says why;
    # the panic was not an error line, so the summary kept the FAIL lines and dropped the cause.
    frames = "".join(f"example.com/pkg/sem.f{i}(...)\n\t/src/pkg/sem/provider.go:{400 + i} +0x3c6\n" for i in range(40))
    output = ("--- FAIL: TestProviderCommands (0.02s)\n"
              "panic: runtime error: slice bounds out of range [1:0] [recovered]\n\n"
              f"goroutine 12 [running]:\npanic({{0x10c334f60?, 0xc00001a588?}})\n{frames}"
              "FAIL\texample.com/pkg/cli\t0.622s\nFAIL\n")
    summary = summarize_item(tool_unit("go test ./...", output, returncode=1), 256)
    assert "panic: runtime error: slice bounds out of range [1:0] [recovered]" in summary.split("\n")
    rust = "   Compiling app v0.1.0\n" * 30 + "thread 'main' panicked at src/main.rs:5:5:\nindex out of bounds\n"
    assert "thread 'main' panicked at src/main.rs:5:5:" in summarize_item(tool_unit("cargo run", rust, 101), 200)


def test_each_result_gives_its_exit_code_to_its_own_call() -> None:
    # Codex runs `go test` in a session that is still running when the next calls return: its result states no
    # exit code, and results were paired with calls in order, so `go test` got the next result's `exit 0` (a
    # false claim) and the last call got none. A result answers the call its tool_call_id names.
    def call(call_id: str, command: str) -> dict:
        return {"id": call_id, "type": "function",
                "function": {"name": "exec_command", "arguments": json.dumps({"cmd": command})}}
    item = dense_dumps([
        {"role": "assistant", "content": None,
         "tool_calls": [call("a", "go test ./..."), call("b", "sed -n '1,40p' internal/cli/root.go"),
                        call("c", "sed -n '1,60p' internal/sem/provider.go")]},
        {"role": "tool", "tool_call_id": "a", "content": "Process running with session ID 51949\nOutput:\ngo: downloading x"},
        {"role": "tool", "tool_call_id": "c", "content": "Process exited with code 2\nOutput:\nsed: provider.go: No such file"},
        {"role": "tool", "tool_call_id": "b", "content": "Process exited with code 0\nOutput:\npackage cli"},
    ])
    lines = summarize_item(item, 512).split("\n")
    assert "$ go test ./..." in lines
    assert "$ sed -n '1,40p' internal/cli/root.go → exit 0" in lines
    assert "$ sed -n '1,60p' internal/sem/provider.go → exit 2" in lines


def legacy_function_unit(command: str, output: str) -> list[dict]:
    """The deprecated chat ``function_call``, answered by a ``function`` message."""
    return [{"role": "assistant", "content": None,
             "function_call": {"name": "bash", "arguments": json.dumps({"command": command})}},
            {"role": "function", "name": "bash", "content": output}]


def test_a_legacy_function_call_is_read_as_a_tool_call() -> None:
    from compactor.compaction.seal import render_lines
    from compactor.formats import get_dialect

    output = "FAILED tests/test_app.py::test_x - AssertionError: boom\n" + "noise\n" * 80 + "<returncode>1</returncode>"
    legacy = legacy_function_unit("pytest -q tests/test_app.py", output)

    summary = summarize_item(dense_dumps(legacy), 300).split("\n")

    assert summary[:2] == ["$ pytest -q tests/test_app.py → exit 1",
                           "FAILED tests/test_app.py::test_x - AssertionError: boom"]
    rendered = "\n".join(render_lines([{"role": "user", "content": "Fix the test."}, *legacy], get_dialect(None)))
    assert "$ pytest -q tests/test_app.py (exit 1)" in summarize_conversation(rendered, 2048)
