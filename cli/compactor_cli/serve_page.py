"""The pages ``compactor serve`` adds for people (docs/report.md): the report page at ``/`` (paste or upload a
transcript, choose mode and target, see the HTML report) and Swagger UI at ``/docs``.

Both pages are static and hold no caller data, so they load without a key; the work behind them does
not: ``POST /report`` (and every API call Swagger UI makes) needs the server's API key when one is
set, sent by the page as ``x-api-key``. These routes exist only on the local server, never in the
deployed API. Swagger UI's script and style are the copies Powertools ships, inlined: nothing is
fetched from the network.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from compactor.jsonutil import bounded_loads, ensure_utf8_encodable
from compactor.transcripts import TranscriptError, read_transcript

REPORT_PATH = "/report"


def index_html(key_required: bool) -> str:
    """The report page: a form posting to ``/report`` and a frame showing the answer."""
    key_note = ("This server was started with <code>--api-key</code>: enter it here." if key_required
                else "Not needed: this server was started without <code>--api-key</code>.")
    return _INDEX.replace("$KEY_NOTE", key_note)


def swagger_html(spec: str) -> str:
    """Swagger UI for ``spec`` (the OpenAPI document), with Powertools' bundled assets inlined."""
    from aws_lambda_powertools.event_handler.openapi import swagger_ui
    from aws_lambda_powertools.event_handler.openapi.swagger_ui.html import generate_swagger_html

    assets = Path(swagger_ui.__file__).parent
    return generate_swagger_html(spec=spec, swagger_js=(assets / "swagger-ui-bundle.min.js").read_text("utf-8"),
                                 swagger_css=(assets / "swagger-ui.min.css").read_text("utf-8"),
                                 swagger_base_url="", oauth2_config=None, persist_authorization=True)


def report(payload: bytes) -> tuple[int, str, bytes]:
    """``POST /report``: ``{"transcript": str, "mode", "target_ratio", "keep_recent", "pin_task"}`` →
    ``(status, content type, body)``: the HTML report, or a JSON error naming the problem."""
    from pydantic import ValidationError

    from compactor.errors import describe_validation
    from compactor.models import CompactRequest
    from compactor_cli.compact_cmd import build_request_body, compact_locally
    from compactor_cli.html_report import render_html

    try:
        # The API's limits (docs/reliability.md#bounded-input): json.loads raised RecursionError on a deep body,
        # and a lone surrogate (in "name" too) failed the page's encoding, each closing the connection.
        form = bounded_loads(payload)
        if not isinstance(form, dict) or not isinstance(form.get("transcript"), str):
            raise ValueError("send a JSON object with the transcript text in \"transcript\"")
        try:
            ensure_utf8_encodable(form)
        except ValueError as exc:
            return _error(422, str(exc))
        from compactor.compaction.modes import names

        mode = form.get("mode", "decision")
        if mode not in names():
            raise ValueError(f"mode must be one of: {', '.join(names())}")
        transcript = read_transcript(form["transcript"])
        args = argparse.Namespace(mode=mode, pin_task=bool(form.get("pin_task")), pins=None, policy=None,
                                  max_tokens=None, decision_policy=None, target_ratio=form.get("target_ratio"),
                                  keep_recent=form.get("keep_recent"))
        request = CompactRequest.model_validate(build_request_body(args, transcript))
    except ValidationError as exc:
        return _error(422, f"invalid request: {describe_validation(exc)}")
    except (ValueError, TranscriptError) as exc:  # JSONLimitError is a ValueError
        return _error(400, str(exc))
    record, units = compact_locally(request)
    if not record.ok:
        return record.status, "application/json", json.dumps(record.body).encode("utf-8")
    title = str(form.get("name") or "pasted transcript")
    page = render_html(request.messages, record, units, title=title, keep_recent=request.keep_recent,
                       items_format=request.format)
    return 200, "text/html; charset=utf-8", page.encode("utf-8")


def _error(status: int, message: str) -> tuple[int, str, bytes]:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return status, "application/json", json.dumps(body).encode("utf-8")


def openapi_text() -> str:
    """The handler's OpenAPI document, in a process where the handler is loaded: a function instance of
    ``compactor serve`` (with ``--workers`` the server's own process never imports it)."""
    from compactor_aws.openapi import document_text

    return document_text(sys.modules["compact"].app)


_INDEX = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Compactor: see a compaction</title>
<style>
:root{--bg:#f7f7f5;--card:#fff;--ink:#1d2330;--mute:#5b6473;--line:#e2e4e8;--accent:#c27c0e;--focus:#1b6ef3}
@media (prefers-color-scheme:dark){:root{--bg:#15181e;--card:#1d2129;--ink:#e6e8ec;--mute:#9aa3b2;--line:#2e3440}}
*{box-sizing:border-box}body{margin:0;background:var(--bg);color:var(--ink);
font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:1100px;margin:0 auto;padding:24px 20px}
h1{font-size:1.4rem;margin:0 0 4px}p.lead{color:var(--mute);margin:0 0 16px}
form{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:16px 18px;display:grid;gap:12px}
label{font-weight:600;display:block;margin-bottom:4px}.hint{color:var(--mute);font-size:.85rem;font-weight:400}
textarea{width:100%;min-height:180px;font:12.5px ui-monospace,Menlo,Consolas,monospace;padding:8px;border-radius:6px;
border:1px solid var(--line);background:var(--bg);color:var(--ink)}
.row{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-end}
input,select{font:inherit;padding:5px 8px;border-radius:6px;border:1px solid var(--line);background:var(--bg);color:var(--ink)}
button{font:inherit;font-weight:600;padding:8px 18px;border-radius:999px;border:0;background:var(--accent);color:#fff;cursor:pointer}
button[disabled]{opacity:.6;cursor:progress}
:focus-visible{outline:3px solid var(--focus);outline-offset:2px}
#status{min-height:1.5em;margin:10px 0}#status.error{color:#c0392b;font-weight:600}
iframe{width:100%;border:1px solid var(--line);border-radius:10px;background:var(--bg);min-height:200px}
nav a{color:var(--focus)}
</style></head><body><main>
<h1>See a compaction</h1>
<p class="lead">Paste or upload an agent transcript (a JSON array of messages, an object with
<code>messages</code>, or JSONL), choose how to compact it, and read the report: every unit, what was kept,
summarized or archived and why. Runs on this machine with the server's catalog.
<nav aria-label="Other pages"><a href="/docs">API reference (Swagger UI)</a> ·
<a href="/v1/openapi.json">OpenAPI document</a></nav></p>
<form id="form">
<div><label for="transcript">Transcript <span class="hint">paste it here, or choose a file below</span></label>
<textarea id="transcript" name="transcript" required spellcheck="false"
 placeholder='[{"role": "user", "content": "Fix the bug."}, ...]'></textarea></div>
<div><label for="file">Transcript file <span class="hint">.json or .jsonl; it replaces the text above</span></label>
<input type="file" id="file" accept=".json,.jsonl,application/json"></div>
<div class="row">
<div><label for="mode">Mode</label><select id="mode" name="mode">
<option value="decision" selected>decision: keep, summarize or archive each unit</option>
<option value="seal">seal: one summary of the aged middle</option>
<option value="mask">mask: old tool outputs become a one-line placeholder</option></select></div>
<div><label for="target">Target ratio <span class="hint">decision mode</span></label>
<input type="number" id="target" name="target_ratio" min="0.01" max="1" step="0.01" value="0.1"></div>
<div><label for="keep">Keep recent <span class="hint">empty: the last 6 as far as they fit</span></label><input type="number" id="keep" name="keep_recent" min="1" step="1" placeholder="default"></div>
<div><label><input type="checkbox" id="pin-task" name="pin_task"> pin only the first user message</label></div>
</div>
<div><label for="key">API key <span class="hint">$KEY_NOTE</span></label>
<input type="password" id="key" name="key" autocomplete="off"></div>
<div><button type="submit" id="run">Compact and show the report</button></div>
</form>
<p id="status" role="status" aria-live="polite"></p>
<iframe id="report" title="Compaction report" hidden></iframe>
</main>
<script>
(function(){
  var form=document.getElementById('form'), status=document.getElementById('status'),
      frame=document.getElementById('report'), run=document.getElementById('run'), name='pasted transcript';
  document.getElementById('file').addEventListener('change',function(e){
    var file=e.target.files[0]; if(!file) return; name=file.name;
    file.text().then(function(text){document.getElementById('transcript').value=text;
      status.className=''; status.textContent='Loaded '+file.name+' ('+file.size+' bytes).';});
  });
  document.getElementById('transcript').addEventListener('input',function(){name='pasted transcript';});
  function fit(){try{frame.style.height=(frame.contentDocument.documentElement.scrollHeight+20)+'px';}catch(e){}}
  form.addEventListener('submit',function(e){
    e.preventDefault(); run.disabled=true; status.className=''; status.textContent='Compacting…';
    var body={transcript:document.getElementById('transcript').value, mode:document.getElementById('mode').value,
      target_ratio:parseFloat(document.getElementById('target').value),
      keep_recent:parseInt(document.getElementById('keep').value,10),
      pin_task:document.getElementById('pin-task').checked, name:name};
    var headers={'Content-Type':'application/json'}, key=document.getElementById('key').value;
    if(key) headers['x-api-key']=key;
    fetch('/report',{method:'POST',headers:headers,body:JSON.stringify(body)}).then(function(r){
      return r.text().then(function(text){
        if(!r.ok){var message=text; try{var j=JSON.parse(text); message=(j.error&&j.error.message)||j.message||text;}catch(x){}
          throw new Error('HTTP '+r.status+': '+message);}
        frame.hidden=false; frame.onload=function(){fit(); if(window.ResizeObserver){new ResizeObserver(fit).observe(frame.contentDocument.body);}}; frame.srcdoc=text;
        status.textContent='Report ready below.';
      });
    }).catch(function(err){status.className='error'; status.textContent=err.message;})
      .finally(function(){run.disabled=false;});
  });
})();
</script></body></html>
"""
