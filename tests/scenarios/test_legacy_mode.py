"""Legacy (seal) mode through ``compactor serve`` against the fake chat provider (docs/behaviour.md#seal)."""

from __future__ import annotations

from typing import Any

from fakes.provider_server import RecordedRequest, Reply, chat_reply

from .conftest import SECRET, SUMMARIZER_PRICES, Stack, default_offers, offer

SEAL = "[Earlier conversation, sealed summary]\n"
SYSTEM = {"role": "system", "content": "You are an agent."}
MESSAGES = [SYSTEM, {"role": "user", "content": "Fix the bug in app.py."},
            {"role": "assistant", "content": "Reading app.py."}, {"role": "user", "content": "Go on."},
            {"role": "assistant", "content": "Patched line 12."}]
READING = ("Reading app.py. It has 40 lines; line 12 divides the total by the item count without checking that "
           "the list is non-empty, so an empty cart raises ZeroDivisionError in checkout().")


def test_nothing_to_seal_is_the_exact_no_op_body(stack: Stack) -> None:
    response = stack.post({"messages": MESSAGES[:3], "keep_recent": 2})

    assert response.status_code == 200
    assert response.json() == {"messages": MESSAGES[:3], "compacted": False}
    assert stack.fake.requests == []


def test_seal_replaces_the_aged_middle_with_the_marked_summary(stack: Stack) -> None:
    stack.fake.enqueue(chat_reply("  Fixed app.py line 12; user asked to continue.  \n", model="served-1",
                                  prompt_tokens=1000, completion_tokens=50, cached_tokens=400))

    # The aged middle is long enough for the sealed transcript to be smaller than the original.
    messages = [*MESSAGES[:2], {"role": "assistant", "content": READING}, *MESSAGES[3:]]
    response = stack.post({"messages": messages, "keep_recent": 2, "max_tokens": 0})

    assert response.status_code == 200
    body = response.json()
    assert body["messages"] == [SYSTEM, {"role": "system", "content": SEAL + "Fixed app.py line 12; user asked to "
                                         "continue."}, *messages[3:]]
    assert body["compacted"] is True
    assert body["usage"] == {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050,
                             "prompt_tokens_details": {"cached_tokens": 400}}
    price_in, price_out = SUMMARIZER_PRICES
    cost = 600 / 1e6 * price_in + 400 / 1e6 * price_in * 0.1 + 50 / 1e6 * price_out
    x_router = body["x_router"]
    assert {key: x_router[key] for key in ("provider", "model_family", "served_model_id", "price_in", "price_out",
                                           "cost_basis", "tokens_cached", "compact")} == {
        "provider": "acme", "model_family": "summarizer", "served_model_id": "served-1", "price_in": price_in,
        "price_out": price_out, "cost_basis": "computed", "tokens_cached": 400, "compact": False}
    assert x_router["cost_usd"] == round(cost, 6)
    assert x_router["policy_fingerprint"] == x_router["decision_trace"]["policy_fingerprint"]
    request, = stack.requests("chat")
    assert request["model"] == "summarizer-model" and request["max_tokens"] == 512
    assert "response_format" not in request
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][1]["content"] == f"user: Fix the bug in app.py.\nassistant: {READING}"


def test_reported_cost_and_empty_summary(stack: Stack) -> None:
    stack.fake.enqueue(chat_reply("   ", cost=0.0031))

    body = stack.post({"messages": MESSAGES, "keep_recent": 2}).json()

    assert body["messages"] == MESSAGES and body["compacted"] is False
    assert (body["x_router"]["cost_usd"], body["x_router"]["cost_basis"]) == (0.0031, "reported")
    assert body["usage"]["total_tokens"] == 15


def test_bad_policy_is_400_invalid_policy_before_any_call(stack: Stack) -> None:
    bad = ["policy", ["top"], ["frobnicate"], ["argmax"], ["id"], ["always", {"action": "next_candidate"}]]

    response = stack.post({"messages": MESSAGES, "keep_recent": 2, "policy_ir": bad})

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"].startswith("policy_ir rejected at admission: ") and "frobnicate" in error["message"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_policy")
    assert stack.fake.requests == []


def test_failing_first_offer_fails_over_and_never_leaks_the_key(stack: Stack) -> None:
    stack.use_offers([*default_offers(stack.fake.base_url),
                      offer("cheapco/cheap", "chat", stack.fake.base_url, (0.1, 0.1))])

    def leaky_500(request: RecordedRequest) -> Reply | None:
        if request.json["model"] != "cheap-model":
            return None
        echoed = request.headers["authorization"]  # a careless upstream quoting the credential back
        return Reply(500, {"error": {"message": f"internal failure for {echoed} ({SECRET})"}})

    seen: list[Any] = []
    script = stack.script

    def responder(request: RecordedRequest) -> Reply:
        seen.append(request.json["model"])
        return leaky_500(request) or script(request)

    stack.fake.responder = responder

    response = stack.post({"messages": MESSAGES, "keep_recent": 2})

    assert response.status_code == 200
    body = response.json()
    assert body["messages"][1] == {"role": "system", "content": SEAL + "Sealed summary."}
    assert seen == ["cheap-model", "summarizer-model"]
    assert body["x_router"]["provider"] == "acme"
    path = body["x_router"]["decision_trace"]["decision_path"]
    attempts = [event for event in path if event["event"] == "attempted"]
    assert [(a["offer"], a["error_kind"], a["http_status"]) for a in attempts] == [
        ("cheapco/cheap", "upstream_error", 500), ("acme/summarizer", None, None)]
    assert SECRET not in response.text and "Bearer sk-" not in response.text
    assert "internal failure" in attempts[0]["error_message"]
