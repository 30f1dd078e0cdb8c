from compactor.compaction.units import instruction_pins, split_units, tail_indexes

from .fixtures import tool_unit


def test_tool_call_absorbs_all_following_results():
    messages = [{"role": "user", "content": "go"}, *tool_unit("a", "ls", "x"),
                {"role": "tool", "tool_call_id": "b", "content": "parallel"}, {"role": "assistant", "content": "ok"}]
    units = split_units(messages)
    assert [(u.start, u.end) for u in units] == [(0, 1), (1, 4), (4, 5)]
    assert units[1].id == "fragment_1"


def test_stray_tool_message_is_its_own_unit():
    messages = [{"role": "tool", "tool_call_id": "x", "content": "orphan"}, {"role": "user", "content": "hi"}]
    assert [(u.start, u.end) for u in split_units(messages)] == [(0, 1), (1, 2)]


def test_default_pins_are_users_plus_system_and_developer():
    messages = [{"role": "system"}, {"role": "user"}, {"role": "assistant"}, {"role": "developer"}, {"role": "user"}]
    assert instruction_pins(messages, None) == [0, 1, 3, 4]


def test_explicit_pins_replace_users_but_never_unpin_system():
    messages = [{"role": "system"}, {"role": "user"}, {"role": "assistant"}, {"role": "user"}]
    assert instruction_pins(messages, [2]) == [0, 2]
    assert instruction_pins(messages, []) == [0]


def test_tail_is_at_least_one():
    assert list(tail_indexes(5, 0)) == [4]
    assert list(tail_indexes(5, 2)) == [3, 4]
    assert list(tail_indexes(2, 10)) == [0, 1]


def test_text_agent_observations_are_not_pinned_by_default():
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "Fix it.\n(Current directory: /r)"},
                {"role": "assistant", "content": "```bash\nls\n```"},
                {"role": "user", "content": "<returncode>0</returncode>\n<output>\na.py\n</output>"},
                {"role": "assistant", "content": "edit"},
                {"role": "user", "content": "[File: a.py]\n(Open file: a.py)\n(Current directory: /r)\nbash-$"},
                {"role": "assistant", "content": "done?"}, {"role": "user", "content": "Yes, and also add a test."},
                {"role": "assistant", "content": "x"}, {"role": "user", "content": "OBSERVATION:\nok"}]
    assert instruction_pins(messages, None) == [0, 1, 7]
    assert instruction_pins(messages, [3]) == [0, 3]  # explicit pins win
