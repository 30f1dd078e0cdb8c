"""What seal's summarizer reads of images, files and server tools' results in every format: a marker or their
titles, never nothing (docs/formats.md, "Images and files")."""

from __future__ import annotations

from compactor.compaction.seal import render_aged
from compactor.formats import get_dialect

IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
DOCUMENT = {"type": "document", "title": "spec.pdf",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}


def test_anthropic_images_documents_and_server_results_are_shown() -> None:
    """Before, a user message holding only a screenshot read "user: ", a tool result of an image "[tool result] ",
    and a web search's results (titles and URLs) nothing at all."""
    items = [
        {"role": "user", "content": [IMAGE, DOCUMENT, {"type": "text", "text": "what fails here?"}]},
        {"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "go-git v6"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
                {"type": "web_search_result", "title": "go-git v6 release", "url": "https://example.com/v6",
                 "encrypted_content": "Eo8BCioIAhgBIiQ"}]},
            {"type": "tool_use", "id": "toolu_1", "name": "Screenshot", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [IMAGE]}]},
    ]
    assert render_aged(items, get_dialect("anthropic-messages")).splitlines() == [
        "user: [image]", "[file spec.pdf]", "what fails here?",
        'assistant: [tool call web_search({"query": "go-git v6"})]',
        "[tool result] go-git v6 release https://example.com/v6",
        "[tool call Screenshot({})]",
        "user: [tool result] [image]",
    ]


def test_responses_and_chat_images_and_files_in_messages_are_shown() -> None:
    responses = [{"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "data:image/png;base64,iVBO"},
        {"type": "input_file", "filename": "report.pdf", "file_data": "JVBERi0="}]}]
    assert render_aged(responses, get_dialect("openai-responses")) == "user: look [image] [file report.pdf]"
    chat = [{"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
        {"type": "file", "file": {"filename": "report.pdf", "file_data": "JVBERi0="}},
        {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}}]}]
    assert render_aged(chat, get_dialect("openai-chat")) == "user: look [image] [file report.pdf] [audio]"
