import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactor.compaction import preparation
from compactor.compaction.preparation import (
    EVIDENCE_EXCERPT_OVER, EVIDENCE_HALF, EVIDENCE_MARKER, INSTRUCTIONS_VIEW_BYTES, MAX_PER_BATCH, PER_BATCH,
    REASON_BATCHES, REASON_FRAGMENTS, RECENT_EXCERPT_OVER, RECENT_HALF, BatchSizer, batch_items, batch_questions,
    batch_size_limit, batch_state, bounded_tail, evidence_view, excerpt, prepare, recent_view, summary_budget,
    tail_length)
from compactor.compaction.preset import materialise, question_template, reply_bytes
from compactor.formats import get_dialect
from compactor.jsonutil import ascii_dumps, ascii_wire_size, dense_dumps, dense_size, json_text_size
from compactor.markers import RECENT_MARKER
from compactor.models import CompactRequest

from .fixtures import fixture_t, tool_unit


def _prepare(messages, **kw):
    kw.setdefault("keep_recent", 1)
    kw.setdefault("target_ratio", 0.1)
    kw.setdefault("pinned_indices", None)
    return prepare(messages, question_template=question_template(), **kw)


def test_worked_example_fixture_t():
    prep = _prepare(fixture_t())
    assert prep.original_bytes == 18555
    assert prep.target_bytes == 1855
    assert prep.protected == {"fragment_0", "fragment_1", "fragment_12"}
    assert len(prep.candidates) == 10
    assert prep.budget == 128
    assert [b.ids() for b in prep.batches] == [
        [f"fragment_{i}" for i in range(2, 10)], ["fragment_10", "fragment_11"]]
    assert prep.recent_evidence == ['[{"role":"assistant","content":"Current state."}]']
    assert prep.reasons == []


def test_models_see_the_model_view_and_fragments_carry_their_own_bytes():
    """What a harness stores beside the chat fields (raw responses, hidden reasoning) reaches no model:
    not the evidence, the item to summarize or the recent evidence; ``bytes`` counts the unit as it is,
    and batches are cut on it (docs/performance.md)."""
    secret = "HARNESS-ONLY"
    extra = {"extra": {"response": secret * 50}, "reasoning_content": secret, "provider_specific_fields": None}
    messages = [{"role": "user", "content": "task"}]
    for i in range(6):
        messages += [{"role": "assistant", "content": None, **extra,
                      "tool_calls": [{"index": 0, "id": f"c{i}", "type": "function",
                                      "function": {"name": "bash", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i} " * 40, **extra}]
    prep = _prepare(messages, keep_recent=2)
    candidates = [c for b in prep.batches for c in b.candidates]
    assert candidates and prep.recent_evidence
    for text in [*(c.evidence for c in candidates), *(c.item for c in candidates), *prep.recent_evidence]:
        assert secret not in text and "provider_specific_fields" not in text
    for c in candidates:
        call, result = messages[c.unit.start:c.unit.end]
        assert json.loads(c.item) == [
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": call["tool_calls"][0]["id"], "type": "function",
                             "function": {"name": "bash", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": result["tool_call_id"], "content": result["content"]}]
        assert c.size == dense_size([call, result]) > len(c.item.encode())
        assert c.bound_bytes > c.record_bytes
    state = batch_state(prep.instructions, prep.recent_evidence, prep.batches[0].candidates)
    assert [f["bytes"] for f in state["fragments"]] == [c.size for c in prep.batches[0].candidates]


def test_budget_formula_floor_and_cap():
    assert summary_budget(1855, 145, 10) == 128
    assert summary_budget(10_000_000, 0, 1) == 1_048_576
    assert summary_budget(-500, 1000, 3) == 128
    assert summary_budget(100_000, 0, 10) == 9_900


def test_unit_crossing_the_tail_is_protected_whole():
    messages = [{"role": "user", "content": "task"}, *tool_unit("a", "ls", "x" * 3000), *tool_unit("b", "cat f", "y")]
    prep = _prepare(messages, keep_recent=1)
    assert "fragment_3" in prep.protected
    assert [u.id for u in prep.candidates] == ["fragment_1"]


def test_excerpted_fragment_has_no_archive_choice():
    messages = [{"role": "user", "content": "task"}, *tool_unit("a", "ls", "z" * 5000), {"role": "assistant", "content": "done"}]
    prep = _prepare(messages)
    cand = prep.batches[0].candidates[0]
    assert EVIDENCE_MARKER in cand.evidence
    assert set(cand.question["criteria"]) == {"keep", "summarize"}
    assert len(cand.evidence) == 2 * EVIDENCE_HALF + len(EVIDENCE_MARKER)


def test_non_ascii_counts_escaped_for_the_32k_bound():
    # 1200 emoji are 4.8 KB of UTF-8 but 14.4 KB escaped; three per batch already exceed 32 000 bytes.
    messages = [{"role": "user", "content": "task"}]
    for i in range(6):
        messages.append({"role": "assistant", "content": "😀" * 1200 + str(i)})
    messages.append({"role": "assistant", "content": "tail"})
    prep = _prepare(messages)
    for batch in prep.batches:
        payload = {"state": {"instructions": prep.instructions, "recent_evidence": prep.recent_evidence,
                             "fragments": [{"id": c.unit.id, "evidence": c.evidence} for c in batch.candidates]},
                   "questions": {c.unit.id: c.question for c in batch.candidates}}
        assert ascii_wire_size(payload) <= 32000
    assert sum(len(b.candidates) for b in prep.batches) == 6


def test_oversized_instructions_are_shown_bounded_and_never_block_candidates():
    messages = [{"role": "system", "content": "s" * 30_000}, {"role": "user", "content": "x" * 40_000},
                {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"},
                {"role": "assistant", "content": "tail"}]
    prep = _prepare(messages)
    assert [c.unit.id for b in prep.batches for c in b.candidates] == ["fragment_2", "fragment_3"]
    assert prep.reasons == []
    assert ascii_wire_size(prep.instructions) <= INSTRUCTIONS_VIEW_BYTES
    assert [m["role"] for m in prep.instructions] == ["system", "user"]
    assert "of 40000 characters of this pinned message omitted" in prep.instructions[1]["content"]
    assert prep.instructions[1]["content"].startswith("x" * 500)


def test_fragment_and_batch_limits():
    messages = [{"role": "user", "content": "task"}]
    messages += [{"role": "assistant", "content": f"m{i}"} for i in range(300)]
    prep = _prepare(messages)
    assert REASON_FRAGMENTS in prep.reasons
    assert sum(len(b.candidates) for b in prep.batches) == 128
    assert len(prep.batches) == 16
    big = [{"role": "user", "content": "task"}] + [
        {"role": "assistant", "content": f"{i}" + "w" * 7000} for i in range(130)]
    prep = _prepare(big + [{"role": "assistant", "content": "tail"}])
    # 128 candidates of ~7 KB: the 50 000-byte summary record fits 7 per batch -> 19 batches (no batch_limit)
    assert REASON_BATCHES not in prep.reasons or len(prep.batches) == 32


def test_the_default_tail_keeps_what_fits_in_its_share_of_the_target_and_always_the_last_message():
    assert tail_length([10, 10, 10], None) == 3
    assert tail_length([10, 10, 10], 22) == 2  # each message counts with its comma
    assert tail_length([10, 10, 10], 21) == 1
    assert tail_length([500, 10], 5) == 1  # the last one even when it alone is over
    assert tail_length([], 100) == 0
    messages = [{"role": "user", "content": "task"}] + [
        {"role": "assistant", "content": f"{i}" + "x" * 2000} for i in range(20)] + [
        {"role": "assistant", "content": "y" * 1000}, {"role": "assistant", "content": "done"}]
    exact = _prepare(messages, keep_recent=6)
    bounded = _prepare(messages, keep_recent=6, bounded=True)  # target ~4.1 KB: the tail may take ~1.2 KB
    assert {"fragment_17", "fragment_21", "fragment_22"} <= exact.protected and "fragment_16" not in exact.protected
    assert bounded.protected == {"fragment_0", "fragment_21", "fragment_22"}
    assert len(bounded.recent_evidence) == 2


def test_only_a_request_without_keep_recent_gets_the_bounded_tail():
    messages = [{"role": "user", "content": "task"}]
    assert bounded_tail(CompactRequest.model_validate({"messages": messages}))
    assert not bounded_tail(CompactRequest.model_validate({"messages": messages, "keep_recent": 6}))


def test_past_the_fragment_limit_the_largest_candidates_are_sent_in_order():
    messages = [{"role": "user", "content": "task"}]
    messages += [{"role": "assistant", "content": f"m{i:03d}" + ("b" * 900 if i % 3 == 0 else "")} for i in range(200)]
    messages.append({"role": "assistant", "content": "tail"})
    prep = _prepare(messages)
    sent = [c.unit.start for b in prep.batches for c in b.candidates]
    assert REASON_FRAGMENTS in prep.reasons and len(sent) == 128 and sent == sorted(sent)
    large = [i + 1 for i in range(200) if i % 3 == 0]
    small = [i + 1 for i in range(200) if i % 3]
    assert set(sent) == set(large) | set(small[:128 - len(large)])  # every large one, then the oldest small ones


def test_flow_input_limit_stops_adding_batches():
    messages = [{"role": "user", "content": "task"}]
    messages += [{"role": "assistant", "content": f"{i}" + "q" * 45_000} for i in range(40)]
    messages.append({"role": "assistant", "content": "tail"})
    prep = _prepare(messages)
    assert "flow_input_limit" in prep.reasons
    flow_input = {f"batch_{i}": {"state": {}, "items": {c.unit.id: c.item for c in b.candidates}}
                  for i, b in enumerate(prep.batches)}
    assert len(json.dumps(flow_input)) <= 900_000


_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=3000)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(_text, min_size=2, max_size=20), st.integers(min_value=1, max_value=4), _text)
def test_incremental_sizes_equal_the_serialised_sizes(contents, keep_recent, pinned):
    messages = [{"role": "user", "content": pinned}] + [
        {"role": "assistant", "content": text, "n": i} for i, text in enumerate(contents)]
    prep = _prepare(messages, keep_recent=keep_recent)
    sizer = BatchSizer(prep.instructions, prep.recent_evidence)
    flow_input = {}
    for index, batch in enumerate(prep.batches):
        payload = {"state": batch_state(prep.instructions, prep.recent_evidence, batch.candidates),
                   "questions": batch_questions(batch.candidates)}
        assert sizer.decision_payload(batch) == ascii_wire_size(payload) <= 32000
        assert sizer.summary_record(batch) == dense_size(batch_items(batch.candidates))
        whole = {c.unit.id: dense_dumps(messages[c.unit.start:c.unit.end]) for c in batch.candidates}
        assert sizer.summary_record(batch) <= sizer.summary_record(batch, bound=True) == dense_size(whole) <= 50000
        entry = {"state": payload["state"], "items": batch_items(batch.candidates)}
        assert sizer.flow_input_entry(f"batch_{index}", batch) == dense_size({f"batch_{index}": entry}) - 2
        flow_input[f"batch_{index}"] = entry
    assert dense_size(flow_input) <= 900_000


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(_text, min_size=2, max_size=20), st.integers(min_value=1, max_value=4), _text)
def test_sizes_measured_once_equal_the_serialised_sizes(contents, keep_recent, pinned):
    """The preparation serialises each message once (docs/performance.md): every size it derives from
    those texts is the size of serialising the whole again."""
    messages = [{"role": "user", "content": pinned}] + [  # every other one with a field models never see
        {"role": "assistant", "content": text, **({"n": i} if i % 2 else {})} for i, text in enumerate(contents)]
    prep = _prepare(messages, keep_recent=keep_recent)
    assert prep.original_bytes == dense_size(messages)
    assert prep.message_sizes == [dense_size(m) for m in messages]
    for batch in prep.batches:
        for cand in batch.candidates:
            unit_messages = messages[cand.unit.start:cand.unit.end]
            assert cand.item == dense_dumps(get_dialect(None).model_view(unit_messages))
            evidence, excerpted = evidence_view(get_dialect(None).model_view(unit_messages))  # as defined
            assert (cand.evidence, "archive" not in cand.question["criteria"]) == (evidence, excerpted)
            assert cand.size == dense_size(unit_messages)
            assert json_text_size(cand.item) == dense_size(cand.item)
            assert json_text_size(cand.evidence) == dense_size(cand.evidence) == len(ascii_dumps(cand.evidence))
    _, flow_input = materialise(prep.batches, instructions=prep.instructions, recent_evidence=prep.recent_evidence,
                                budget=prep.budget, decision_policy=["policy"], generation_policy=None,
                                max_tokens=None)
    assert prep.flow_input_bytes == dense_size(flow_input)


def test_flow_input_size_counts_the_later_blocks_on_the_corpus():
    from .fixtures import CORPUS_FILES, corpus_messages

    later_blocks = 0
    for name in CORPUS_FILES:
        messages = corpus_messages(name)
        messages = messages["messages"] if isinstance(messages, dict) else messages
        prep = _prepare(messages, keep_recent=4)
        _, flow_input = materialise(prep.batches, instructions=prep.instructions,
                                    recent_evidence=prep.recent_evidence, budget=prep.budget,
                                    decision_policy=["policy"], generation_policy=None, max_tokens=None)
        assert prep.flow_input_bytes == dense_size(flow_input), name
        assert prep.original_bytes == dense_size(messages), name
        later_blocks += sum(1 for batch in prep.batches if batch.later)
    assert later_blocks


_long_text = st.text(alphabet=st.characters(codec="utf-8"), min_size=0, max_size=6000) | st.sampled_from(
    ["x" * 2002, "é" * 2003, "😀" * 1990, "a" * 4001 + "\n" * 3, "\x00" * 2500, "b" * 9000 + "é"])
_json_value = st.recursive(st.none() | st.booleans() | st.integers() | _long_text,
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=8)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(_json_value, min_size=1, max_size=3))
def test_the_evidence_cut_from_clipped_strings_is_the_excerpt_of_the_whole(unit):
    """The evidence encodes long strings cut to their ends (docs/performance.md): the same excerpt."""
    expected = excerpt(ascii_dumps(unit), EVIDENCE_EXCERPT_OVER, EVIDENCE_HALF, EVIDENCE_MARKER)
    assert evidence_view(unit) == expected
    assert evidence_view(unit, [dense_dumps(message) for message in unit]) == expected


_plain_text = st.lists(st.sampled_from(["src/app.py ", "ok", " ", "\n", "\t", "\r", '"', "\\", "x" * 40, "y" * 290]),
                       max_size=30).map("".join)


def _evidence_both_ways(arguments_chars, content, long_member, command="cat src/app.py "):
    """A tool unit's evidence with its content's escaped text cut from the message's dense JSON (``content_at``)
    and as defined (the excerpt of the unit's whole ASCII JSON)."""
    from compactor.jsonutil import dense_with_plain_member_at

    call = tool_unit("c_1", command + "a" * arguments_chars, "")[0]
    tool = {"role": "tool", "tool_call_id": "c_1", **({"extra": "z" * 1500} if long_member else {}), "content": content}
    dense, start = dense_with_plain_member_at(tool, "content", content)
    around = evidence_view([call, tool], [dense_dumps(call), dense], start)
    return around, excerpt(ascii_dumps([call, tool]), EVIDENCE_EXCERPT_OVER, EVIDENCE_HALF, EVIDENCE_MARKER)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=1500), _plain_text, st.integers(min_value=0, max_value=1500), st.booleans(),
       st.sampled_from(["cat src/app.py ", "cat caf\u00e9\x7f\u2028 \U0001f600 "]))
def test_the_evidence_around_a_plainly_escaped_content_is_the_excerpt_of_the_whole(arguments_chars, text, filler,
                                                                                    long_member, command):
    """The evidence of a unit whose last message ends with a content the codec escaped takes the content's escaped
    text from the message's dense JSON instead of escaping it again (docs/performance.md): the same excerpt, with
    a call message short or long (cut), ASCII or not (DEL, a line separator, an emoji), a long member beside the
    content, and contents of every length."""
    around, defined = _evidence_both_ways(arguments_chars, text + "q" * filler, long_member, command)
    assert around == defined


def test_the_evidence_around_a_plainly_escaped_content_at_the_excerpt_edges():
    """Every split of the excerpt's ends between the head and the content, on both sides of its limit."""
    for arguments_chars in (0, 300, 440, 450, 460, 470, 600, 1100, 1300):
        for chars in range(1300):
            for content in ("q" * chars, *(('"' * (chars // 2), "\n" * (chars // 2)) if chars % 7 == 0 else ())):
                around, defined = _evidence_both_ways(arguments_chars, content, False)
                assert around == defined, (arguments_chars, chars)


def test_batches_grow_past_eight_fragments_only_while_one_summary_reply_holds_their_summaries():
    assert batch_size_limit(800, None) == PER_BATCH == 8
    assert batch_size_limit(800, reply_bytes(4096)) == MAX_PER_BATCH == 16  # 12,902 bytes: 16 summaries of 800
    assert batch_size_limit(1300, reply_bytes(4096)) == 9
    assert batch_size_limit(2000, reply_bytes(4096)) == PER_BATCH  # never fewer than before
    messages = [{"role": "user", "content": "task"}] + [
        {"role": "assistant", "content": f"{i}" + "x" * 700} for i in range(30)] + [
        {"role": "assistant", "content": "done"}]
    unknown = _prepare(messages, target_ratio=0.3)
    grown = _prepare(messages, target_ratio=0.3, reply_bytes=reply_bytes(4096))
    assert grown.budget == unknown.budget and grown.budget * 16 <= reply_bytes(4096)
    assert [len(b.candidates) for b in unknown.batches] == [8, 8, 8, 6]
    assert [len(b.candidates) for b in grown.batches] == [16, 14]
    assert [c.unit.id for b in grown.batches for c in b.candidates] == [u.id for u in unknown.candidates]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(_json_value, min_size=1, max_size=3))
def test_the_recent_evidence_cut_from_clipped_strings_is_the_excerpt_of_the_whole(unit):
    """The recent evidence encodes long strings cut to their ends when it encodes the unit (docs/performance.md)."""
    view = get_dialect(None).model_view(unit)
    assert recent_view(unit) == excerpt(dense_dumps(view), RECENT_EXCERPT_OVER, RECENT_HALF, RECENT_MARKER)[0]


def _prepare_with(limit_name, limit, messages, **kw):
    """The preparation with ``preparation.<limit_name>`` (a content-length threshold of a faster path) at ``limit``:
    -1 takes the path for every content, 10**9 for none."""
    saved = getattr(preparation, limit_name)
    setattr(preparation, limit_name, limit)
    try:
        return _prepare(messages, **kw)
    finally:
        setattr(preparation, limit_name, saved)


_long_message = st.builds(lambda role, text, extra: {"role": role, "content": text, **extra},
                          st.sampled_from(["system", "user", "assistant"]), _long_text,
                          st.sampled_from([{}, {"n": 1}, {"reasoning_content": "x" * 1500}]))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(_long_message, min_size=1, max_size=8), st.integers(min_value=1, max_value=4), st.booleans())
def test_long_contents_measured_without_encoding_prepare_the_same(messages, keep_recent, bounded):
    """A long ASCII content is measured and encoded only in a candidate (docs/performance.md): with every
    content treated so, and with none, the preparation is the same."""
    messages = [*messages, *tool_unit("call_0", "cat src/app.py", "x" * 2500), *messages]
    kw = {"keep_recent": keep_recent, "bounded": bounded, "target_ratio": 0.2}
    assert _prepare_with("LONG_CONTENT", -1, messages, **kw) == _prepare_with("LONG_CONTENT", 10**9, messages, **kw)


@pytest.mark.parametrize("limit_name", ["LONG_CONTENT", "PLAIN_CONTENT"])
def test_contents_on_a_faster_path_prepare_the_same_on_the_corpus(limit_name):
    """Long contents measured without encoding (``LONG_CONTENT``) and contents escaped by the codec
    (``PLAIN_CONTENT``), each path taken for every content and for none, on the corpus."""
    from .fixtures import CORPUS_FILES, corpus_messages

    for name in CORPUS_FILES:
        messages = corpus_messages(name)
        messages = messages["messages"] if isinstance(messages, dict) else messages
        for keep_recent in (1, 6):
            assert (_prepare_with(limit_name, -1, messages, keep_recent=keep_recent)
                    == _prepare_with(limit_name, 10**9, messages, keep_recent=keep_recent)), name


def _without_salience_is_the_same(messages, **kw):
    """A preparation without the names scan (``salience=False``) has the same batches and reasons, no hints
    and no later blocks; ``exceeds_one_request``, which prepares so, answers as the whole preparation does."""
    from compactor.compaction.decision import LIMIT_REASONS, exceeds_one_request

    whole, bare = _prepare(messages, **kw), _prepare(messages, salience=False, **kw)
    assert bare.reasons == whole.reasons
    assert [b.ids() for b in bare.batches] == [b.ids() for b in whole.batches]
    assert [(b.decision_bytes, b.record_bytes, b.state_bytes) for b in bare.batches] == [
        (b.decision_bytes, b.record_bytes, b.state_bytes) for b in whole.batches]
    assert all(b.names == [] and b.later == {} for b in bare.batches)
    request = CompactRequest.model_validate({"messages": messages, "keep_recent": kw.get("keep_recent", 1),
                                             "target_ratio": 0.1})
    assert exceeds_one_request(request) == any(reason in LIMIT_REASONS for reason in whole.reasons)
    return whole


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.tuples(_text, _text), min_size=1, max_size=12), st.integers(min_value=1, max_value=4))
def test_a_preparation_without_the_names_scan_has_the_same_batches_and_reasons(units, keep_recent):
    messages = [{"role": "user", "content": "task src/app.py"}]
    for n, (command, output) in enumerate(units):
        messages += tool_unit(f"c_{n}", command + " src/app.py", output)
    _without_salience_is_the_same(messages, keep_recent=keep_recent)


def test_a_preparation_without_the_names_scan_has_the_same_limits():
    """Every limit's reason (fragments, batches, flow input), and none, with and without the names scan."""
    many = [{"role": "user", "content": "task"}] + [m for i in range(140) for m in tool_unit(
        f"c_{i}", f"cat src/f_{i % 9}.py", f"src/f_{i}.py ok " * 40)]
    wide = [{"role": "user", "content": "task"}] + [m for i in range(40) for m in tool_unit(
        f"c_{i}", f"cat src/f_{i}.py", f"{i} src/f_{i}.py " + "q" * 45_000)]
    narrow = [{"role": "user", "content": "task"}] + [
        {"role": "assistant", "content": f"{i} src/x_{i}.py" + "w" * 7000} for i in range(130)]
    reasons = [_without_salience_is_the_same(messages + [{"role": "assistant", "content": "done"}]).reasons
               for messages in (many, wide, narrow, many[:9])]
    assert REASON_FRAGMENTS in reasons[0] and "flow_input_limit" in reasons[1] and reasons[3] == []


# ASCII contents with what the two escapes write differently (control characters, DEL, quotes, backslashes, the
# escapes' own text), tags the names scan leaves out, and names used again.
_ascii_output = st.lists(st.sampled_from(["src/app.py", "parse_header", "ok", " ", "\n", "\n", "\t", '"', "\\",
                                          "\\x41", "<tool_result>", "\x00", "\x1b[0m", "\x7f", "\x0c", "\r"]),
                         max_size=40).map("".join)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.lists(st.tuples(_ascii_output, st.sampled_from(["tool", "assistant", "user"]), st.booleans()), min_size=1,
                max_size=8), st.integers(min_value=1, max_value=4))
def test_contents_escaped_by_the_codec_prepare_the_same(contents, keep_recent):
    """A content the names scan's translation passes is escaped by the ``unicode_escape`` codec and scanned from
    that translation (docs/performance.md): with every ASCII content treated so, and with none, the preparation
    (sizes, items, evidence, hints, later blocks) is the same."""
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "fix src/app.py"}]
    for n, (text, role, call) in enumerate(contents):
        calls = tool_unit(f"c_{n}", "cat parse_header.py", "")[0]["tool_calls"]
        messages += (tool_unit(f"c_{n}", "cat src/app.py", text) if call
                     else [{"role": role, "content": text}, {"role": role, "content": text, "n": 1},
                           {"role": "assistant", "tool_calls": calls, "content": text},
                           {"content": text, "extra": {"ms": 3}, "tool_call_id": f"c_{n}", "role": "tool"},
                           {"content": text, "role": role}])
    messages.append({"role": "assistant", "content": "parse_header src/app.py"})
    kw = {"keep_recent": keep_recent, "target_ratio": 0.1}
    assert _prepare_with("PLAIN_CONTENT", -1, messages, **kw) == _prepare_with("PLAIN_CONTENT", 10**9, messages, **kw)


def test_a_translated_content_names_its_message_only_when_the_view_carries_that_content():
    """The names scan reads a content's kept translation only when the message's model view is one item with that
    very content and no tool calls (docs/performance.md); otherwise it scans the view as it is."""
    from compactor.compaction.salience import translated

    content = "read src/app.py " * 80
    message = {"role": "tool", "content": content}
    translation = translated(content)
    names = preparation._message_names
    assert names(message, [message], [dense_dumps(message)], translation) == {"src/app.py"}
    other = {"role": "tool", "content": "read lib/other_file.py " * 80}
    assert names(message, [other], [dense_dumps(other)], translation) == {"lib/other_file.py"}
    calls = {"role": "assistant", "content": content, "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "bash", "arguments": json.dumps({"command": "cat parse_header.py"})}}]}
    assert names(calls, [calls], [dense_dumps(calls)], translated(content)) == {"src/app.py", "parse_header.py"}
