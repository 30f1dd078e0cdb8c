"""``compactor invoke``: template functions run in a fresh process, their configuration applied."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from compactor_cli.sam_template import Template, TemplateError, merge_globals

from .conftest import REPO

ECHO_TEMPLATE = """\
Transform: AWS::Serverless-2016-10-31
Parameters:
  Budget:
    Type: Number
    Default: 1500
  Mode:
    Type: String
    Default: inline
    AllowedValues: [inline, stepfunctions]
Conditions:
  UseStepFunctions: !Equals [!Ref Mode, stepfunctions]
Globals:
  Function:
    Runtime: python3.12
    Timeout: 7
    Environment:
      Variables:
        GLOBAL_ONLY: from-globals
        SHARED: from-globals
        BUDGET: !Ref Budget
Resources:
  LibLayer:
    Type: AWS::Serverless::LayerVersion
    Properties:
      ContentUri: lib/
  Machine:
    Type: AWS::Serverless::StateMachine
  EchoFunction:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: echo/
      Handler: app.handler
      MemorySize: 256
      Layers: [!Ref LibLayer]
      Environment:
        Variables:
          SHARED: from-function
          LABEL: !Sub "${AWS::StackName}-${Mode}"
          MACHINE: !If [UseStepFunctions, !Ref Machine, !Ref AWS::NoValue]
          ENABLED: true
"""

ECHO_HANDLER = """\
import os
import libmod

def handler(event, context):
    print("function output goes to stderr")
    if event.get("fail"):
        raise ValueError("boom")
    names = ("GLOBAL_ONLY", "SHARED", "BUDGET", "LABEL", "MACHINE", "ENABLED", "AWS_LAMBDA_FUNCTION_NAME")
    return {
        "env": {name: os.environ.get(name) for name in names},
        "remaining_ms": context.get_remaining_time_in_millis(),
        "memory": context.memory_limit_in_mb,
        "layer": libmod.VALUE,
        "event": event,
    }
"""


@pytest.fixture
def echo_project(tmp_path: Path) -> Path:
    (tmp_path / "template.yaml").write_text(ECHO_TEMPLATE, encoding="utf-8")
    (tmp_path / "echo").mkdir()
    (tmp_path / "echo" / "app.py").write_text(ECHO_HANDLER, encoding="utf-8")
    (tmp_path / "lib" / "python").mkdir(parents=True)
    (tmp_path / "lib" / "python" / "libmod.py").write_text("VALUE = 'from the layer'\n", encoding="utf-8")
    (tmp_path / "event.json").write_text(json.dumps({"hello": "world"}), encoding="utf-8")
    return tmp_path


def run_invoke(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "compactor_cli", "invoke", *args], cwd=cwd, input=stdin,
                          capture_output=True, text=True, check=False)


def test_invokes_the_compact_function_with_a_repository_event() -> None:
    result = run_invoke("CompactFunction", "-e", "tests/events/healthz.json", cwd=REPO)

    assert result.returncode == 0, result.stderr
    response = json.loads(result.stdout)
    assert response["statusCode"] == 200
    assert json.loads(response["body"])["ok"] is True


def test_applies_globals_environment_layers_and_timeout(echo_project: Path) -> None:
    result = run_invoke("EchoFunction", "-e", "event.json", cwd=echo_project)

    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    assert output["env"] == {
        "GLOBAL_ONLY": "from-globals", "SHARED": "from-function", "BUDGET": "1500", "LABEL": "compactor-local-inline",
        "MACHINE": None, "ENABLED": "true", "AWS_LAMBDA_FUNCTION_NAME": "EchoFunction",
    }
    assert 0 < output["remaining_ms"] <= 7000
    assert output["memory"] == 256
    assert output["layer"] == "from the layer"
    assert output["event"] == {"hello": "world"}
    assert "function output goes to stderr" in result.stderr


def test_parameter_overrides_and_event_from_stdin(echo_project: Path) -> None:
    result = run_invoke("EchoFunction", "-e", "-", "--param", "Mode=stepfunctions", "--param", "Budget=900",
                        cwd=echo_project, stdin='{"from": "stdin"}')

    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)
    assert output["env"]["BUDGET"] == "900"
    assert output["env"]["MACHINE"] == "Machine"
    assert output["event"] == {"from": "stdin"}


def test_a_failing_handler_reports_the_error_like_lambda(echo_project: Path) -> None:
    (echo_project / "event.json").write_text('{"fail": true}', encoding="utf-8")

    result = run_invoke("EchoFunction", "-e", "event.json", cwd=echo_project)

    assert result.returncode == 1
    assert json.loads(result.stdout) == {"errorMessage": "boom", "errorType": "ValueError"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("NoSuchFunction", "-e", "event.json"), "functions: EchoFunction"),
        (("EchoFunction", "-e", "event.json", "--param", "Mode=sideways"), "not one of"),
        (("EchoFunction", "-e", "event.json", "--param", "Unknown=1"), "unknown parameter"),
        (("EchoFunction", "-e", "missing.json"), "missing.json"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(echo_project: Path, args: tuple[str, ...], message: str) -> None:
    result = run_invoke(*args, cwd=echo_project)

    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(("content", "message"), [
    (b'{"caf\xe9": 1}', "bad.json: not UTF-8 text (an invalid byte at offset 5)"),
    (b"not json", "bad.json: not JSON: Expecting value"),
    (b'[{"role": "user", "content": "a transcript"}]', "bad.json: the event is an array, not a JSON object"),
])
def test_an_event_file_that_is_no_event_exits_2_without_a_traceback(echo_project: Path, content: bytes,
                                                                     message: str) -> None:
    (echo_project / "bad.json").write_bytes(content)

    result = run_invoke("EchoFunction", "-e", "bad.json", cwd=echo_project)

    assert (result.returncode, result.stdout) == (2, "")
    assert message in result.stderr and "Traceback" not in result.stderr


def test_resolves_sub_join_select_find_in_map_and_get_att(tmp_path: Path) -> None:
    path = tmp_path / "template.yaml"
    path.write_text(textwrap.dedent("""\
        Parameters:
          Stage: {Type: String, Default: v1}
        Mappings:
          Sizes: {small: {memory: 512}}
        Resources:
          Api: {Type: AWS::Serverless::Api}
        """), encoding="utf-8")
    template = Template.load(path)

    assert template.resolve({"Fn::Sub": ["${Api}/${Stage}/${Extra}", {"Extra": "x"}]}) == "Api/v1/x"
    assert template.resolve({"Fn::Sub": "${Api.Arn} ${!Literal}"}) == "Api.Arn ${Literal}"
    assert template.resolve({"Fn::Join": ["-", ["a", {"Ref": "Stage"}]]}) == "a-v1"
    assert template.resolve({"Fn::Select": [1, ["a", "b"]]}) == "b"
    assert template.resolve({"Fn::FindInMap": ["Sizes", "small", "memory"]}) == 512
    assert template.resolve({"Fn::GetAtt": ["Api", "RootResourceId"]}) == "Api.RootResourceId"
    with pytest.raises(TemplateError, match="not supported"):
        template.resolve({"Fn::ImportValue": "elsewhere"})


def test_globals_merge_maps_concatenate_lists_and_replace_scalars() -> None:
    merged = merge_globals(
        {"Timeout": 3, "Layers": ["A"], "Environment": {"Variables": {"X": "1", "Y": "1"}}},
        {"Timeout": 9, "Layers": ["B"], "Environment": {"Variables": {"Y": "2"}}},
    )

    assert merged == {"Timeout": 9, "Layers": ["A", "B"], "Environment": {"Variables": {"X": "1", "Y": "2"}}}
