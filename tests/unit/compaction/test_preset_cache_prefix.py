"""The preset's classify node names the state members every batch repeats (``cache_prefix``, docs/providers.md
"Prompt caching"): exactly the leading members of each batch's state that are the same in all batches,
and none when a request has one batch (no other call would read the prefix it pays to write)."""

from __future__ import annotations

from compactor.compaction.preparation import prepare
from compactor.compaction.preset import materialise, question_template

from .fixtures import corpus_messages

TRANSCRIPT = "msa-v2-toolcalls_deepseek-chat_astroid-1978.json"


def _classify_nodes(batches, prep) -> tuple[list[dict], dict]:
    flow, flow_input = materialise(batches, instructions=prep.instructions, recent_evidence=prep.recent_evidence,
                                   budget=prep.budget, decision_policy=["policy"], generation_policy=None,
                                   max_tokens=None)
    return [node for node in flow[1].values() if node.get("kind") == "decision"], flow_input


def test_the_cache_prefix_is_the_leading_state_every_batch_repeats() -> None:
    messages = corpus_messages(TRANSCRIPT)
    prep = prepare(messages, keep_recent=4, target_ratio=0.1, pinned_indices=None,
                   question_template=question_template())
    assert len(prep.batches) >= 2
    nodes, flow_input = _classify_nodes(prep.batches, prep)
    states = [batch["state"] for batch in flow_input.values()]
    names = nodes[0]["cache_prefix"]
    assert all(node["cache_prefix"] == names for node in nodes)
    for state in states:
        assert list(state)[:len(names)] == names  # leading, in this order
        assert [state[name] for name in names] == [states[0][name] for name in names]
    # The next member differs between batches: the prefix ends where the batches stop sharing.
    following = list(states[0])[len(names)]
    assert len({repr(state[following]) for state in states}) == len(states)
    single, _ = _classify_nodes(prep.batches[:1], prep)
    assert "cache_prefix" not in single[0]
