import base64
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.chat import content_text
from compactor.compaction import salience
from compactor.compaction.preparation import (DECISION_PAYLOAD_MAX_BYTES, BatchSizer, batch_questions, batch_state,
                                              prepare)
from compactor.compaction.preset import materialise, question_template
from compactor.compaction.salience import action_message, hint_order, later_block, names_in
from compactor.formats import get_dialect
from compactor.jsonutil import (
    MAX_BODY_DEPTH, ascii_dumps, ascii_wire_size, dense_dumps, dense_size, depth_exceeds, json_text_size)

from .fixtures import CORPUS_FILES, corpus_messages, tool_unit


def test_names_are_paths_and_code_identifiers_not_words_or_tags():
    assert names_in("see src/app.py and parse_header, DataElement, os.path.join; the word Error </output>") == {
        "src/app.py", "parse_header", "DataElement", "os.path.join"}


def test_a_name_after_a_dot_is_the_name_used_again():
    # ``.FancyArrowPatch`` (a reST cross-reference in a docstring) and ``getLogger().getEffectiveLevel()`` name what
    # a later ``FancyArrowPatch(...)`` or ``logger.getEffectiveLevel()`` uses: the leading dot made them no name at
    # all, so the names hint never asked a summarizer to keep them. A path keeps its dots.
    assert names_in("A `.FancyArrowPatch` to point; logging.getLogger().getEffectiveLevel(); rm -r .pytest_cache") == {
        "FancyArrowPatch", "logging.getLogger", "getEffectiveLevel", "pytest_cache"}
    assert names_in("see ./src/app.py and .github/workflows/ci.yml, not .gitignore or ...") == {
        "./src/app.py", ".github/workflows/ci.yml"}
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    messages += tool_unit("c0", "sed -n 1615,1700p lib/text.py",
                          "\n".join(["    arrow_patch", "        A `.FancyArrowPatch` to point from *xytext* to *xy*."]
                                    + [f"    line {j} of the docstring" for j in range(80)]))
    for i in range(1, 4):
        messages += tool_unit(f"c{i}", f"cat src/mod_{i}.py", "\n".join(f"def helper_{i}_{j}(): pass" for j in range(80)))
    messages += [{"role": "assistant", "content": "So the arrow is a FancyArrowPatch(posA, posB) drawn after the text."},
                 {"role": "assistant", "content": "Done."}]
    prep = prepare(messages, keep_recent=1, target_ratio=0.1, pinned_indices=None, question_template=question_template())
    assert "FancyArrowPatch" in {name for batch in prep.batches for name in batch.names}


def test_an_action_is_quoted_short():
    body = "\n".join(f"line {i}" for i in range(400))
    call = tool_unit("a", f"cat > src/app.py <<'EOF'\n{body}\nEOF", "<returncode>0</returncode>")[0]
    reduced = action_message(call)
    command = json.loads(reduced["tool_calls"][0]["function"]["arguments"])["command"]
    assert command == "cat > src/app.py <<'EOF' …" and "id" not in reduced["tool_calls"][0]
    assert action_message({"role": "user", "content": "```bash\nls\n```"}) is None
    assert action_message({"role": "assistant", "content": "Run:\n```bash\nls -la\n```\nthen"})["content"] == "```bash\nls -la\n```"


def test_later_block_stays_within_its_limit():
    actions = [json.dumps({"role": "assistant", "content": f"```bash\ncat f{i}.py\n```"}) for i in range(200)]
    block = later_block([f"name_{i}" for i in range(300)], actions, 1500)
    assert ascii_wire_size(block) <= 1500 and block["later_actions"][-1] == actions[-1]
    assert later_block([], [], 1500) == {}


def test_batches_carry_the_names_later_messages_use_and_stay_within_the_payload_bound():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for i in range(12):
        messages += tool_unit(f"c{i}", f"cat src/mod_{i}.py", "\n".join(f"def helper_{i}_{j}(): pass" for j in range(80)))
    messages += [{"role": "assistant", "content": "Now I call helper_3_7 from src/mod_3.py and helper_9_1."},
                 {"role": "assistant", "content": "Done."}]
    prep = prepare(messages, keep_recent=1, target_ratio=0.1, pinned_indices=None, question_template=question_template())
    names = {name for batch in prep.batches for name in batch.names}
    assert {"helper_3_7", "src/mod_3.py", "helper_9_1"} <= names  # helper_9_1: used again inside its own batch
    assert "helper_9_2" not in names and "helper_3_8" not in names  # never used again
    for batch in prep.batches:
        state = batch_state(prep.instructions, prep.recent_evidence, batch.candidates, batch.later)
        assert ascii_wire_size({"state": state, "questions": batch_questions(batch.candidates)}) <= DECISION_PAYLOAD_MAX_BYTES
    flow_ir, flow_input = materialise(prep.batches, instructions=prep.instructions, recent_evidence=prep.recent_evidence,
                                      budget=prep.budget, decision_policy=None, generation_policy=None, max_tokens=None)
    system = flow_ir[1]["batch_0_generate"]["system"]
    assert "Names used again later in the transcript" in system and "together at most" in system
    for index, batch in enumerate(prep.batches):  # the names as data too, for the built-in summarizer
        node = flow_ir[1][f"batch_{index}_generate"]
        assert node.get("keep_names") == (batch.names or None)
        assert not batch.names or ", ".join(batch.names) in node["system"]  # and in words, for models


def test_a_batch_may_spend_more_than_the_budget_where_the_names_used_later_are():
    from compactor.compaction.preset import reply_tokens, summary_limits

    assert summary_limits(128, 8, []) == (1024, 1024)  # 8 items at the floor budget; one may take them all
    assert summary_limits(128, 8, ["helper_one", "src/a.py"]) == (1024 + 44, 1024 + 44)  # 2 bytes a hint byte (each name with its ", ")
    assert summary_limits(128, 40, []) == (2048, 5120)  # the cap stops at 2048
    assert summary_limits(5000, 4, []) == (5000, 20_000)  # a loose target's budget is used as it is
    assert reply_tokens(2048) == 704 and reply_tokens(100) == 512 and reply_tokens(100_000) == 4096
    messages = [{"role": "user", "content": "task"}]
    for i in range(8):
        messages += tool_unit(f"c{i}", f"cat src/mod_{i}.py", "x\n" * 600)
    messages.append({"role": "assistant", "content": "done"})
    prep = prepare(messages, keep_recent=1, target_ratio=0.01, pinned_indices=None, question_template=question_template())
    assert prep.budget == 128 and prep.batches[0].names == []
    flow_ir, _ = materialise(prep.batches, instructions=prep.instructions, recent_evidence=prep.recent_evidence,
                             budget=prep.budget, decision_policy=None, generation_policy=None, max_tokens=None)
    nodes = flow_ir[1]
    assert "at most 1024 UTF-8 bytes, and all summaries together at most 1024" in nodes["batch_0_generate"]["system"]
    assert nodes["batch_0_generate"]["max_tokens"] == 512 and nodes["batch_0_patch"]["max_string_bytes"] == 1024
    flow_ir, _ = materialise(prep.batches, instructions=prep.instructions, recent_evidence=prep.recent_evidence,
                             budget=prep.budget, decision_policy=None, generation_policy=None, max_tokens=300)
    assert flow_ir[1]["batch_0_generate"]["max_tokens"] == 300  # the caller's max_tokens wins


def test_a_request_that_does_not_set_max_tokens_gets_summary_calls_sized_to_their_batch():
    from compactor.compaction.preset import requested_max_tokens
    from compactor.models import CompactRequest

    messages = [{"role": "user", "content": "task"}]
    assert requested_max_tokens(CompactRequest.model_validate({"messages": messages})) is None
    assert requested_max_tokens(CompactRequest.model_validate({"messages": messages, "max_tokens": 512})) == 512


# The names scan cuts texts into runs with translate/split instead of a regex over the whole text
# (docs/performance.md); it must find exactly what the regex definition finds.
def _names_by_regex(text: str) -> set[str]:
    if "<" in text:
        text = salience._TAG.sub(" ", text)
    return {name for name in map(salience.token_name, salience._TOKEN.findall(text)) if salience._is_name(name)}


_PIECES = ["src/app.py", "parse_header", "DataElement", "os.path.join", "a/b", "x", "_", "__init__", "12", "3a_b",
           "-foo_bar", "@user_id", "+x.y", "~/.bashrc", "..", ".", "/", "//", "foo.", "bar:", "baz;", "q,", "é",
           "café_x", "x_é", "٣a_b", "…", "✓", "\u00a0", "\u2028", "\u3000", "\x1c", "\x0b", "😀", "Ωmega_x", "<output>",
           "</tool_result>", "<a-b>", "<", ">", "\\", '"', "'", "\n", "\t", " ", "(", ")", "=", "#", "$", "%", "ſ_x",
           "K_x", "ﬁle_name", "\ud800", "ALLCAPS", "camelCase", "A1_b", "a-b-c_d", "x@y.z"]


def _code_identifier_by_definition(token: str) -> bool:
    """``salience.is_code_identifier`` as it was defined, a character at a time."""
    if "." in token:
        return True
    core = token.strip("_")
    if "_" in core:
        return any(c.isalpha() for c in core)
    return any(c.isupper() for c in core[1:]) and any(c.islower() for c in core)


def _is_name_by_definition(token: str) -> bool:
    """``salience._is_name`` as it was defined, a character at a time."""
    if len(token) < 4 or len(token) > 120:
        return False
    if "/" in token:
        return "//" not in token and any(c.isalpha() for c in token)
    return bool(salience._IDENTIFIER.fullmatch(token)) and _code_identifier_by_definition(token)


_TOKEN_CHARS = "aZq_./-09@+~é" + "\u03a9\u017f\u212a\ufb01\u0663\u01c5\u00b5\u00aa\u2160\u00df\u0130"


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(st.text(alphabet=_TOKEN_CHARS, max_size=9) | st.sampled_from(_PIECES))
def test_a_name_is_judged_as_defined_whatever_its_letters(token):
    """A token's letters and capitals are found by case changes in C when it is ASCII (docs/performance.md): the
    same verdict as testing each character, for ASCII tokens and for tokens with letters that are not ASCII
    (titlecase, a long s, the Kelvin sign, a ligature, Arabic digits, a feminine ordinal, a Roman numeral)."""
    for candidate in (token, token.strip("_"), "a/" + token, token.upper(), token.lower(), "_" + token.title()):
        assert salience._is_name(candidate) == _is_name_by_definition(candidate), candidate
        assert salience.is_code_identifier(candidate) == _code_identifier_by_definition(candidate), candidate


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=6), max_size=40))
def test_the_names_scan_finds_what_the_token_regex_finds(pieces):
    text = "".join(pieces)
    assert names_in(text) == _names_by_regex(text)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.sampled_from(_PIECES) | st.text(max_size=6), max_size=20), max_size=8))
def test_the_names_scan_is_the_same_when_its_kept_verdicts_start_again(texts):
    """The verdicts on runs are kept across texts and replaced when full (docs/performance.md): with room
    for only a few runs, every text still gets exactly the regex definition's names."""
    saved = salience._JUDGED_MAX, salience._verdicts
    salience._JUDGED_MAX, salience._verdicts = 5, salience._Verdicts()
    try:
        for pieces in texts:
            text = " ".join(pieces)
            assert names_in(text) == _names_by_regex(text)
    finally:
        salience._JUDGED_MAX, salience._verdicts = saved


@settings(max_examples=2000, deadline=None, derandomize=True)
@given(st.text(alphabet="aBzZ09_./~@+-", max_size=10) | st.sampled_from(["Never", "fixes.", "0100", "abcd", "aBcd",
                                                                         "Abcd..", "-Abcd", "0aBc", "DEBUG", "x.y"]))
def test_a_run_judged_a_plain_word_holds_no_name(run):
    """Runs judged without the full test (docs/performance.md) are runs the full test finds no name in."""
    if salience._plain_word(run):
        assert salience._run_names(run) == ()


def _runs_cut_whole(text):
    if text.isascii():
        return set(text.encode("ascii").translate(salience._BYTE_SEPARATORS).decode("ascii").split())
    return set(text.encode("utf-8", "surrogatepass").translate(salience._BYTE_SEPARATORS).split())


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_PIECES + ["\n", " ", "  ", "\n\n"]) | st.text(max_size=6), max_size=60),
       st.integers(min_value=1, max_value=12), st.integers(min_value=1, max_value=12))
def test_a_long_text_cut_a_piece_at_a_time_has_the_runs_and_names_of_the_whole(pieces, piece_chars, search):
    """A text over _PIECE_CHARS is cut a piece at a time, each piece ending before one of _CUT_AT (a space, a
    newline, a double quote, a comma) within _CUT_SEARCH characters, else the whole rest (docs/performance.md): the same runs, of the same type,
    as the whole text cut at once, so the same names; pieces and searches of 1-12 characters put cuts
    everywhere, in runs, tags and multi-byte characters' neighbourhoods, and leave some pieces to the end."""
    text = "".join(pieces)
    saved = salience._PIECE_CHARS, salience._CUT_SEARCH
    salience._PIECE_CHARS, salience._CUT_SEARCH = piece_chars, search
    try:
        if len(text) > piece_chars:
            runs = salience._long_runs(text)
            whole = _runs_cut_whole(text)
            assert runs == whole and {type(run) for run in runs} == {type(run) for run in whole}
        assert names_in(text) == _names_by_regex(text)
    finally:
        salience._PIECE_CHARS, salience._CUT_SEARCH = saved


def test_a_long_output_is_cut_in_pieces_with_the_names_of_the_whole():
    line = "0128 src/module_9/file_128.py: ok parse_header\tDataElement,os.path.join; "
    ascii_text = (line * 2000)[:140_000] + "x" * 40_000 + " tail_name " + "\n".join(["a/b"] * 9000)
    for text in (ascii_text, ascii_text + " café_x" * 3000):  # str runs, then bytes runs
        assert len(text) > 4 * salience._PIECE_CHARS
        runs = salience._long_runs(text)
        assert runs == _runs_cut_whole(text) and {type(run) for run in runs} == {str if text.isascii() else bytes}
        assert names_in(text) == _names_by_regex(text)


def test_a_long_line_of_minified_json_is_cut_at_its_quotes_and_commas():
    """A tool output of minified JSON has no space or newline to end a piece at: it is cut at a double quote or a
    comma (separators too), not scanned whole, with the runs and names of the whole."""
    text = json.dumps([{"path": f"src/m{i}/f_{i}.py", "ok": True, "n": i} for i in range(4000)], separators=(",", ":"))
    assert len(text) > 4 * salience._PIECE_CHARS and " " not in text and "\n" not in text
    ends = list(salience._piece_ends(text))
    assert len(ends) >= 4 and ends[-1] == len(text) and ends == sorted(set(ends))
    assert all(text[end] in salience._CUT_AT for end in ends[:-1])
    assert salience._long_runs(text) == _runs_cut_whole(text)
    assert names_in(text) == _names_by_regex(text)


def test_every_character_a_piece_may_end_before_is_a_separator():
    assert all(salience._BYTE_SEPARATORS[ord(separator)] == 0x20 for separator in salience._CUT_AT)
    assert all(salience._ASCII_SEPARATORS[ord(separator)] == 0x20 for separator in salience._CUT_AT)


def test_the_names_scan_finds_what_the_token_regex_finds_on_the_corpus():
    for name in CORPUS_FILES:
        for message in corpus_messages(name):
            text = content_text(message.get("content")) + " " + json.dumps(message.get("tool_calls"))
            assert names_in(text) == _names_by_regex(text), name


def _later_block_by_trials(names, actions, limit):
    """The later block as first written: every trial block encoded whole."""
    block = {"names_used_later": list(names)} if names else {}
    while block.get("names_used_later") and ascii_wire_size(block) > limit // 2:
        block["names_used_later"] = block["names_used_later"][:len(block["names_used_later"]) * 3 // 4]
    chosen = []
    for action in reversed(actions):
        if ascii_wire_size({**block, "later_actions": [action, *chosen]}) > limit:
            break
        chosen.insert(0, action)
    if chosen:
        block["later_actions"] = chosen
    if not block.get("names_used_later"):
        block.pop("names_used_later", None)
    return block if ascii_wire_size(block) <= limit else {}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.text(max_size=30), max_size=40), st.lists(st.text(max_size=300), max_size=30),
       st.integers(min_value=0, max_value=4000))
def test_the_later_block_measures_each_action_once_and_chooses_as_whole_trials_do(names, actions, limit):
    assert later_block(names, actions, limit) == _later_block_by_trials(names, actions, limit)


@given(st.sets(st.text(alphabet="ab./_", max_size=6), max_size=30))
@settings(deadline=None, derandomize=True)
def test_the_hint_order_puts_paths_and_dotted_names_first(names):
    assert hint_order(names) == sorted(names, key=lambda name: ("/" not in name and "." not in name, name))


_ARGUMENT = st.text(max_size=20) | st.sampled_from(["src/app.py", 'a "quoted_name" x', "line\nnext_line", "é_x/y", "\\n_x"])
_CALL = st.fixed_dictionaries({"id": st.sampled_from(["call_1", "x"]), "type": st.just("function"), "function":
                               st.fixed_dictionaries({"name": st.sampled_from(["bash", "read_file"]), "arguments": (
                                   st.dictionaries(st.sampled_from(["command", "path", "x_y"]), _ARGUMENT, max_size=3)
                                   .map(json.dumps) | _ARGUMENT | st.dictionaries(st.text(max_size=4), _ARGUMENT))})})
_ACTION = (st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none() | st.text(max_size=20),
                                  "tool_calls": st.lists(_CALL | st.just("not a call"), max_size=3)})
           | st.builds(lambda text: {"role": "assistant", "content": text}, st.lists(
               st.sampled_from(["```bash\ncat src/x_y.py\n```", "```\n" + "a_b " * 80 + "\n```", "see os.path", "\n"]),
               max_size=4).map("".join))
           | st.just({"role": "user", "content": "```bash\nls src/a.py\n```"}))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(_ACTION, max_size=6), st.integers(min_value=0, max_value=3))
def test_quoted_actions_read_each_action_s_names_from_its_json(messages, start):
    """The names of an action come from its quoted JSON (docs/performance.md): what encoding it again gives."""
    expected = [(i, salience.quoted_action(m)[0], salience.message_names(salience.action_message(m)))
                for i, m in enumerate(messages) if i >= start and salience.action_message(m) is not None]
    assert salience.quoted_actions(messages, start) == expected


def _loads_or_text(text):
    try:
        return json.loads(text)
    except ValueError:
        return text


def _action_by_definition(message):
    """The reduced action as first defined: every call's arguments parsed by ``json.loads``, every string
    shortened, the whole action encoded."""
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return None
    calls = message.get("tool_calls")
    if not (isinstance(calls, list) and calls):
        return salience.quoted_action(message)  # fenced commands: unchanged by the calls' fast paths
    short = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        arguments = function.get("arguments")
        parsed = _loads_or_text(arguments) if isinstance(arguments, str) else arguments
        if isinstance(parsed, dict):
            parsed = {k: salience._shortened(v) if isinstance(v, str) else v for k, v in parsed.items()}
        elif isinstance(parsed, str):
            parsed = salience._shortened(parsed)
        short.append({"type": "function", "function": {"name": function.get("name"),
                                                       "arguments": json.dumps(parsed, ensure_ascii=False)}})
    reduced = {"role": "assistant", "content": None, "tool_calls": short}
    quoted = json.dumps(reduced, ensure_ascii=False, separators=(",", ":"))
    return (quoted, reduced) if len(quoted) <= salience.MAX_ACTION_CHARS else None


_JSON_TEXT = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                       max_size=3),
                          max_leaves=8).map(json.dumps)
_ARGUMENTS_TEXT = (_JSON_TEXT | st.tuples(st.sampled_from(["", " ", "\ufeff", "\n"]), _JSON_TEXT,
                                          st.sampled_from(["", " ", "\t", "x", "}", ",1", "{}"])).map("".join)
                   | st.text(max_size=12) | st.sampled_from(["NaN", "-Infinity", "[1,", '"a', "1e999"]))


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_ARGUMENTS_TEXT | st.just("[" * 3000) | st.sampled_from(["[" * n + "]" * n for n in (128, 129, 130, 131)]))
def test_arguments_parse_as_json_loads_parses_them(text):
    """The scanner alone settles a text that is one JSON value end to end; anything else goes through
    ``json.loads`` (docs/performance.md): the same value, or the text itself where ``json.loads`` fails or the
    value is nested deeper than a request may be (128 levels; docs/reliability.md "JSON inside strings"). A text
    shorter than the 260 characters of 130 nested arrays, the shortest too deep, is not looked into for its depth."""
    try:
        expected = _loads_or_text(text)
        if depth_exceeds(expected, MAX_BODY_DEPTH):
            expected = text
    except RecursionError:
        expected = text
    assert repr(salience._parsed_arguments(text)) == repr(expected)


_LONG_ARGUMENT = st.sampled_from(["x" * 199, "y" * 200, "z" * 201, "cat > a.py <<EOF\n" + "line\n" * 60, "é" * 150])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(_CALL | st.builds(lambda text, name: {"id": "c", "type": "function", "function": {
    "name": name, "arguments": text}}, _ARGUMENTS_TEXT | _LONG_ARGUMENT | _LONG_ARGUMENT.map(
        lambda v: json.dumps({"command": v})), st.sampled_from(["bash", None, 'a"b'])) | st.just("not a call"),
    min_size=1, max_size=3))
def test_an_action_is_the_action_reduced_and_encoded_as_defined(calls):
    """The calls' arguments parsed by the scanner, short ones not looked into for strings to cut, and the
    action's JSON built around its calls' JSON: the same action and text as the definition."""
    message = {"role": "assistant", "content": None, "tool_calls": calls}
    assert salience.quoted_action(message) == _action_by_definition(message)


# The calls' JSON of a tool-call message is cut from the message's dense JSON when the caller has it
# (docs/performance.md): the same names as encoding the calls again, whatever the message's other members
# hold (another "tool_calls" key nested in a member, the calls not last, text that looks like the key).
_MEMBER = st.sampled_from([("content", None), ("content", 'see "tool_calls": src/a_b.py'), ("name", "x_y"),
                           ("extra", {"tool_calls": ["src/x_y.py"]}), ("content", [{"type": "text", "text": "os.path"}]),
                           ("reasoning_content", '{"tool_calls":1}')])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(_MEMBER, max_size=3), st.lists(_CALL | st.just({"tool_calls": [{"id": "z_q"}]}), min_size=1, max_size=3),
       st.integers(min_value=0, max_value=3))
def test_names_with_the_message_s_dense_json_are_the_names_without_it(members, calls, position):
    items = [("role", "assistant"), *members]
    items.insert(min(position, len(items)), ("tool_calls", calls))
    message = dict(items)
    assert salience.message_names(message, dense_dumps(message)) == salience.message_names(message)
    assert salience._calls_json(message, dense_dumps(message)) == dense_dumps(message["tool_calls"])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.text(max_size=30), max_size=40), st.lists(st.text(max_size=300), max_size=30),
       st.integers(min_value=0, max_value=4000), st.booleans())
def test_the_sized_later_block_is_the_later_block_with_its_wire_size(names, actions, limit, measured):
    """The ``later`` block with its size, each action measured once by the caller (docs/performance.md)."""
    quoted = [dense_dumps(action) for action in actions]  # the actions a block quotes are JSON texts
    sizes = [ascii_wire_size(text) for text in quoted] if measured else None
    block, size = salience.sized_later_block(names, quoted, limit, sizes)
    assert block == _later_block_by_trials(names, quoted, limit)
    assert size == ascii_wire_size(block)
    assert [salience.text_wire_size(text) for text in quoted] == [ascii_wire_size(text) for text in quoted]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.text(alphabet='ab_./"\\\x7f\n\xe9', max_size=12), max_size=20),
       st.lists(st.text(alphabet='ab "\\\x7f\n\x01\xe9', max_size=40), max_size=12),
       st.integers(min_value=0, max_value=1500))
def test_a_later_block_s_dense_size_is_its_encoding_s(names, actions, limit):
    """``later_dense_size`` from the block's wire size: the encoder's dense size, whatever the strings hold
    (non-ASCII, DEL, quotes, control characters), for any block ``sized_later_block`` makes."""
    quoted = [dense_dumps(action) for action in actions]
    block, size = salience.sized_later_block(names, quoted, limit, [salience.text_wire_size(t) for t in quoted])
    assert size == ascii_wire_size(block)
    assert salience.later_dense_size(block, size) == dense_size(block)
    for whole in ({"names_used_later": names} if names else {}, {"later_actions": quoted} if quoted else {}):
        assert salience.later_dense_size(whole, ascii_wire_size(whole)) == dense_size(whole)


_DEL_TEXT = st.text(alphabet='ab "\\\x7f\n\x00\xe9')


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.recursive(st.none() | _DEL_TEXT, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(_DEL_TEXT, inner, max_size=3), max_leaves=6))
def test_a_json_text_s_wire_size_is_the_encoder_s_with_a_del_in_it(value):
    """The ASCII encoder escapes DEL (``\\u007f``) and the dense one writes it as it is: a JSON text holding
    one is measured by the encoder, not as the ASCII text it is."""
    for text in (dense_dumps(value), ascii_dumps(value)):
        assert salience.text_wire_size(text) == ascii_wire_size(text)
    action = dense_dumps({"role": "assistant", "content": "rm a\x7fb"})
    assert salience.text_wire_size(action) == ascii_wire_size(action) == json_text_size(action) + 5


def _salience_by_definition(messages, prep, payload_max_bytes=DECISION_PAYLOAD_MAX_BYTES):
    """Each batch's hint and ``later`` block as first defined: every message's names (of every message,
    hidden reasoning left out) and every action encoded anew, each later block chosen by whole trials."""
    views = [get_dialect(None).model_view([m]) for m in messages]
    names = [set().union(*map(salience.message_names, view)) for view in views]
    kept = [i for u in prep.units if u.id in prep.protected for i in u.indexes()]
    carried = set().union(*(names[i] for i in kept))
    last_use = salience.last_uses(names)
    sizer = BatchSizer(prep.instructions, prep.recent_evidence, payload_max_bytes)
    flow_room = 900_000 - 2 - sum(sizer.flow_input_entry(f"batch_{i}", b) + 1 for i, b in enumerate(prep.batches))
    result = []
    for batch in prep.batches:
        indexes = [i for c in batch.candidates for i in c.unit.indexes()]
        found = set().union(*(names[i] for i in indexes))
        hint = salience.batch_hint(hint_order({n for i in indexes for n in names[i] if last_use[n] > i} - carried))
        touching = [dense_dumps(action_message(m)) for i, m in enumerate(messages)
                    if i > max(indexes) and action_message(m) is not None
                    and not found.isdisjoint(salience.message_names(action_message(m)))]
        room = min(3000, payload_max_bytes - sizer.decision_payload(batch), flow_room) - 16
        later = _later_block_by_trials(hint, touching, room) if room > 0 else {}
        flow_room -= ascii_wire_size(later) + 16 if later else 0
        result.append((hint, later))
    return result


_TEXT = st.lists(st.sampled_from([p for p in _PIECES if p != "\ud800"])  # text a request may hold
                 | st.sampled_from(["src/app.py", "parse_header", "os.path.join", "lib/x_y.py"])  # names to use again
                 | st.text(st.characters(exclude_categories=("Cs",)), max_size=6), max_size=12).map(" ".join)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(_TEXT, _TEXT, st.booleans()), min_size=3, max_size=14), st.integers(min_value=1, max_value=4),
       st.sampled_from([DECISION_PAYLOAD_MAX_BYTES, 3000]))
def test_the_salience_of_measured_texts_is_the_salience_by_definition(units, keep_recent, payload_max_bytes):
    """The hints and later blocks from the preparation's measured texts (docs/performance.md) are those of
    the definition, on random transcripts of tool calls and plain turns."""
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "task os.path.join"}]
    for n, (command, output, call) in enumerate(units):
        messages += tool_unit(f"c_{n}", command, output) if call else [{"role": "assistant", "content": command}]
    prep = prepare(messages, keep_recent=keep_recent, target_ratio=0.1, pinned_indices=None,
                   question_template=question_template(), payload_max_bytes=payload_max_bytes)
    assert [(b.names, b.later) for b in prep.batches] == _salience_by_definition(messages, prep, payload_max_bytes)


def test_the_salience_of_measured_texts_is_the_salience_by_definition_on_the_corpus():
    later_blocks = 0
    for name in CORPUS_FILES:
        messages = corpus_messages(name)
        for keep_recent in (1, 4):
            prep = prepare(messages, keep_recent=keep_recent, target_ratio=0.1, pinned_indices=None,
                           question_template=question_template())
            assert [(b.names, b.later) for b in prep.batches] == _salience_by_definition(messages, prep), name
            later_blocks += sum(1 for b in prep.batches if b.later)
    assert later_blocks


@settings(max_examples=600, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from([p for p in _PIECES if p.isascii()] + [chr(code) for code in range(32)] + ["\x7f"])
                | st.text(alphabet=st.characters(max_codepoint=127), max_size=6), max_size=60))
def test_the_names_of_a_translated_content_are_the_names_scan_s(pieces):
    """The preparation translates a content once, when it encodes it, and scans it later from that translation
    (docs/performance.md): the same names as the names scan and the regex definition, control characters and
    DEL included (which the translation marks for the encoding)."""
    text = "".join(pieces)
    if "<" in text:  # the scan leaves tags out first: such a content is scanned as it is
        return
    assert salience.names_in_translated(salience.translated(text)) == names_in(text) == _names_by_regex(text)


def _format_unit(format_name, call_id, command, output):
    """A shell call and its output in ``format_name``'s items."""
    if format_name == "anthropic-messages":
        return [{"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": "bash",
                                                   "input": {"command": command}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id,
                                              "content": [{"type": "text", "text": output}]}]}]
    return [{"type": "function_call", "call_id": call_id, "name": "bash", "arguments": json.dumps({"command": command})},
            {"type": "function_call_output", "call_id": call_id, "output": output}]


def _format_text(format_name, role, text):
    if format_name == "anthropic-messages":
        return {"role": role, "content": [{"type": "text", "text": text}]}
    return {"type": "message", "role": role,
            "content": [{"type": "output_text" if role == "assistant" else "input_text", "text": text}]}


@pytest.mark.parametrize("format_name", ["anthropic-messages", "openai-responses"])
def test_other_formats_get_the_names_and_later_actions_of_their_calls_and_results(format_name):
    """Names in tool results (``tool_result`` blocks, ``*_call_output`` items) and calls (``tool_use`` blocks,
    ``*_call`` items) count as a chat message's do, and a later call is quoted as a later action: the items are
    read as the chat messages they are (``chat.chat_reading``). Before, these formats' hints came from text
    blocks alone and held almost no names, and no later actions."""
    items = [_format_text(format_name, "user", "task")]
    for i in range(12):
        items += _format_unit(format_name, f"c{i}", f"cat src/mod_{i}.py",
                              "\n".join(f"def helper_{i}_{j}(): pass" for j in range(80)))
    items.append(_format_text(format_name, "assistant", "Now I call helper_3_7 from src/mod_3.py and helper_9_1."))
    items += _format_unit(format_name, "again", "sed -n 1,5p src/mod_5.py", "ok")
    items.append(_format_text(format_name, "assistant", "Done."))
    if format_name == "anthropic-messages":  # a finished turn: its last two units are no longer protected
        items.append(_format_text(format_name, "user", "Thanks."))  # (docs/formats.md "Hidden reasoning")
    prep = prepare(items, keep_recent=1, target_ratio=0.1, pinned_indices=None, question_template=question_template(),
                   dialect=get_dialect(format_name))
    names = {name for batch in prep.batches for name in batch.names}
    assert {"helper_3_7", "src/mod_3.py", "helper_9_1", "src/mod_5.py"} <= names
    assert "helper_9_2" not in names and "helper_3_8" not in names  # never used again
    later = [(batch, action) for batch in prep.batches for action in batch.later.get("later_actions", [])]
    assert later and all("sed -n 1,5p src/mod_5.py" in action for _, action in later)
    assert all("src/mod_5.py" in batch.names for batch, _ in later)  # quoted for the batch that read it


def test_a_local_shell_call_is_read_by_its_action():
    """A Responses ``local_shell_call`` carries its command as ``action`` (no ``arguments``): its paths count as
    names and a later one is quoted with its command, not as an empty call (review finding)."""
    items = [_format_text("openai-responses", "user", "task")]
    for i in range(10):
        items += [{"type": "local_shell_call", "call_id": f"c{i}",
                   "action": {"type": "exec", "command": ["cat", f"src/mod_{i}.py"]}},
                  {"type": "local_shell_call_output", "call_id": f"c{i}",
                   "output": "\n".join(f"def helper_{i}_{j}(): pass" for j in range(80))}]
    items += [{"type": "local_shell_call", "call_id": "again",
               "action": {"type": "exec", "command": ["sed", "-n", "1,5p", "src/mod_5.py"]}},
              {"type": "local_shell_call_output", "call_id": "again", "output": "ok"},
              _format_text("openai-responses", "assistant", "Done.")]
    prep = prepare(items, keep_recent=1, target_ratio=0.1, pinned_indices=[], question_template=question_template(),
                   dialect=get_dialect("openai-responses"))
    names = {name for batch in prep.batches for name in batch.names}
    assert "src/mod_5.py" in names
    later = [action for batch in prep.batches for action in batch.later.get("later_actions", [])]
    assert any("src/mod_5.py" in action for action in later) and all('"null"' not in action for action in later)


# The verdicts kept across texts and requests are bounded by size, not only by count (docs/performance.md, "The
# salience verdicts' memory"): a run over _KEPT_RUN_MAX characters is judged each time and never kept, and past
# _HELD_CHARS_MAX characters (or _JUDGED_MAX runs) held, new verdicts replace the old.
def _held(verdicts):
    """The runs the verdicts hold (``named`` and ``other`` hold only judged runs) and their characters."""
    assert verdicts.named <= verdicts.judged and verdicts.self_named <= verdicts.named
    assert set(verdicts.other) <= verdicts.named
    return len(verdicts.judged), sum(len(run) for run in verdicts.judged), max(map(len, verdicts.judged), default=0)


def _assert_within_bounds(verdicts):
    count, chars, longest = _held(verdicts)
    assert count <= salience._JUDGED_MAX and chars <= salience._HELD_CHARS_MAX and longest <= salience._KEPT_RUN_MAX
    assert verdicts.chars == chars  # the count kept beside the sets


def _blob(rng, chars):
    """A base64 image's text: one run (``/`` and ``+`` are run characters)."""
    return base64.b64encode(rng.randbytes(chars * 3 // 4)).decode("ascii").rstrip("=")


def test_the_kept_verdicts_hold_at_most_their_bound_whatever_runs_callers_send():
    """Texts with distinct long runs (base64 images of 100 KB, ASCII or in a text that is not ASCII, some
    ending in a name after digits or holding names) and many distinct runs of 1,000 characters: the verdicts
    hold at most _HELD_CHARS_MAX characters (about 7.5 MB of runs go through; before the bound, all of them
    stayed), and every text gets the regex definition's names."""
    rng = random.Random(12)
    saved = salience._verdicts
    salience._verdicts = salience._Verdicts()
    through = 0
    try:
        for i in range(40):
            blob = _blob(rng, 100_000)
            texts = [f"the screenshot: {blob} done, see src/app_{i}.py",
                     f"{i:04d}" * 300 + f"parse_header_{i} and " + blob[:3000],  # a long run that is a name
                     f"é {blob[:5000]}…/src/mod_{i}.py…ré_sumé_{i} x.y_{i}\n",  # a long run with names, not ASCII
                     " ".join(f"{i}_{j}_" + _blob(rng, 1000)[:994] for j in range(80))]  # runs of 1,000 kept
            for text in texts:
                assert names_in(text) == _names_by_regex(text)
                _assert_within_bounds(salience._verdicts)
                through += len(text)
            assert f"parse_header_{i}" in names_in(texts[1]) and f"/src/mod_{i}.py" in names_in(texts[2])
        assert through > 3 * salience._HELD_CHARS_MAX
    finally:
        salience._verdicts = saved


def test_a_container_keeps_no_caller_s_large_outputs_in_its_verdicts():
    """``service.compact`` of requests each with a distinct 200 KB base64 tool output among the candidates and
    in the kept tail (a pasted screenshot): the verdicts stay within their bound, and each answer is the one
    computed with fresh verdicts."""
    from compactor.policy.defaults import DEFAULT_DECISIONS_POLICY

    from .test_admission_reuse import router, run

    rng = random.Random(7)
    saved = salience._verdicts
    salience._verdicts = salience._Verdicts()
    try:
        for request in range(14):
            messages = [{"role": "system", "content": "Rules."}, {"role": "user", "content": "Look at the screen."}]
            for i in range(4):
                output = _blob(rng, 200_000) if i in (1, 3) else f"{i} src/shot_{request}.py: ok " * 200
                messages += tool_unit(f"c{i}", f"base64 shot_{request}_{i}.png", output)
            messages.append({"role": "assistant", "content": f"Done with shot_{request}_1.png."})
            fields = {"messages": messages, "keep_recent": 1, "target_ratio": 0.1,
                      "decision_policy_ir": DEFAULT_DECISIONS_POLICY}
            answer = run(fields, router())
            assert answer["compacted"]
            _assert_within_bounds(salience._verdicts)
            kept = salience._verdicts
            salience._verdicts = salience._Verdicts()
            assert run(fields, router()) == answer
            salience._verdicts = kept
        assert salience._verdicts.chars < 1_000_000  # 5.6 MB of outputs went through
    finally:
        salience._verdicts = saved


def _names_from_scratch(text):
    """``names_in`` with fresh verdicts and no bound."""
    saved = salience._verdicts, salience._JUDGED_MAX, salience._KEPT_RUN_MAX, salience._HELD_CHARS_MAX
    salience._verdicts, salience._JUDGED_MAX, salience._KEPT_RUN_MAX, salience._HELD_CHARS_MAX = (
        salience._Verdicts(), 1 << 40, 1 << 40, 1 << 40)
    try:
        return names_in(text)
    finally:
        salience._verdicts, salience._JUDGED_MAX, salience._KEPT_RUN_MAX, salience._HELD_CHARS_MAX = saved


_LONG_PIECES = ["0123456789" * 3 + "parse_header", "src/app.py" * 4, "éé" * 10 + "src/app.py" + "é" * 5 + "x.y_z",
                "ab+/" * 12, "-" * 25 + "DataElement...", "é/a/b.py+é" * 3, "…" * 12 + "camelCase", "✓x_y" * 8]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.sampled_from(_PIECES + _LONG_PIECES) | st.text(max_size=6)
                         | st.text(alphabet="aZ_./~@+-09é…", min_size=10, max_size=60), max_size=12), max_size=10),
       st.integers(min_value=1, max_value=40), st.integers(min_value=1, max_value=200),
       st.integers(min_value=1, max_value=12))
def test_the_names_scan_with_bounded_verdicts_is_the_scan_from_scratch(texts, run_max, chars_max, count_max):
    """With small bounds (a run over 1-40 characters or bytes never kept, new verdicts past 1-200 characters or
    1-12 runs held), texts of short and long runs, ASCII and not (long runs of a text that is not ASCII holding
    names among them), each joined with spaces or as one run, get the names of a scan with fresh verdicts and no
    bound, and of the regex definition, and the verdicts stay within the bounds across their replacements."""
    saved = salience._verdicts, salience._JUDGED_MAX, salience._KEPT_RUN_MAX, salience._HELD_CHARS_MAX
    salience._verdicts, salience._JUDGED_MAX, salience._KEPT_RUN_MAX, salience._HELD_CHARS_MAX = (
        salience._Verdicts(), count_max, run_max, chars_max)
    try:
        for pieces in texts:
            for text in (" ".join(pieces), "".join(pieces)):
                expected = _names_from_scratch(text)
                assert names_in(text) == expected == _names_by_regex(text)
                _assert_within_bounds(salience._verdicts)
    finally:
        salience._verdicts, salience._JUDGED_MAX, salience._KEPT_RUN_MAX, salience._HELD_CHARS_MAX = saved


def test_verdicts_over_their_bound_are_replaced_even_by_one_text_s_runs():
    """Verdicts that reach their bound (by runs or by characters), even by one text's runs alone, are replaced by
    new empty ones once that text's names are found."""
    saved = salience._verdicts, salience._JUDGED_MAX, salience._HELD_CHARS_MAX
    salience._verdicts, salience._JUDGED_MAX, salience._HELD_CHARS_MAX = salience._Verdicts(), 50, 400
    try:
        assert names_in("see src/app.py and parse_header") == {"src/app.py", "parse_header"}
        kept = salience._verdicts
        assert kept.judged == {"see", "src/app.py", "and", "parse_header"} and kept.chars == 28
        many = " ".join(f"name_{i}" for i in range(60))  # 60 runs: over 50
        assert names_in(many) == {f"name_{i}" for i in range(60)}
        assert salience._verdicts is not kept and _held(salience._verdicts) == (0, 0, 0)
        assert names_in("see src/app.py") == {"src/app.py"} and _held(salience._verdicts) == (2, 13, 10)
        wide = " ".join(f"src/{i:03d}/" + "x" * 40 + ".py" for i in range(10))  # 510 characters: over 400
        assert names_in(wide) == _names_by_regex(wide) and _held(salience._verdicts) == (0, 0, 0)
        _assert_within_bounds(salience._verdicts)
    finally:
        salience._verdicts, salience._JUDGED_MAX, salience._HELD_CHARS_MAX = saved


def test_a_run_of_the_longest_kept_length_is_kept_and_a_longer_one_judged_each_time():
    saved = salience._verdicts
    salience._verdicts = salience._Verdicts()
    try:
        kept, longer = "7" * (salience._KEPT_RUN_MAX - 9) + "src/a.py.", "7" * (salience._KEPT_RUN_MAX - 8) + "src/a.py."
        assert len(kept) == salience._KEPT_RUN_MAX and len(longer) == salience._KEPT_RUN_MAX + 1
        for _ in range(2):
            assert names_in(f"{kept} {longer} x_yz") == {"src/a.py", "x_yz"}
        assert salience._verdicts.judged == {kept, "x_yz"} and salience._verdicts.other == {kept: ("src/a.py",)}
        assert salience._verdicts.chars == salience._KEPT_RUN_MAX + 4
    finally:
        salience._verdicts = saved


def test_a_legacy_function_call_gets_the_names_and_later_actions_of_a_tool_call():
    """The deprecated chat ``function_call`` (answered by a ``function`` message): names in its arguments count, and
    a later one is quoted as a later action, as a ``tool_calls`` entry's are."""
    def legacy(command, output):
        return [{"role": "assistant", "content": None,
                 "function_call": {"name": "bash", "arguments": json.dumps({"command": command})}},
                {"role": "function", "name": "bash", "content": output}]

    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for i in range(12):
        messages += legacy(f"cat src/mod_{i}.py", "\n".join(f"def helper_{i}_{j}(): pass" for j in range(80)))
    messages += [*legacy("sed -n 1,5p src/mod_5.py", "ok"), {"role": "assistant", "content": "Done."}]
    prep = prepare(messages, keep_recent=1, target_ratio=0.1, pinned_indices=None,
                   question_template=question_template())
    names = {name for batch in prep.batches for name in batch.names}
    assert "src/mod_5.py" in names and "src/mod_4.py" not in names
    later = [(batch, action) for batch in prep.batches for action in batch.later.get("later_actions", [])]
    assert later and all("sed -n 1,5p src/mod_5.py" in action for _, action in later)
    assert action_message(messages[2]) == {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "bash", "arguments": '{"command": "cat src/mod_0.py"}'}}]}
