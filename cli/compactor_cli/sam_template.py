"""Reading ``template.yaml`` the way ``sam local invoke`` needs it, without SAM CLI.

Loads YAML with CloudFormation short tags (``!Ref``, ``!Sub``, ``!GetAtt``…), merges a function's
properties over ``Globals.Function`` and resolves the intrinsics that configure a function locally:
parameters (defaults or overrides), pseudo parameters, conditions, ``Sub``/``Join``/``Select``/``If``/
``FindInMap``. References to other resources resolve to their logical ids (placeholders: nothing is
deployed). PyYAML is a development dependency, imported only here and only when needed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from compactor_cli.files import os_cause

SERVERLESS_FUNCTION = "AWS::Serverless::Function"
SERVERLESS_LAYER = "AWS::Serverless::LayerVersion"
_NO_VALUE = object()
_SUB_VARIABLE = re.compile(r"\$\{([^!}][^}]*)\}")


class TemplateError(ValueError):
    """The template cannot be read or does not describe what was asked for."""


def load_template(path: Path) -> dict[str, Any]:
    """Parse a SAM/CloudFormation YAML template, short tags turned into their long JSON form."""
    try:
        import yaml
    except ImportError as exc:
        raise TemplateError("reading template.yaml needs PyYAML: pip install pyyaml") from exc

    class CloudFormationLoader(yaml.SafeLoader):
        """SafeLoader that understands ``!Ref`` and the ``!Fn`` short forms."""

    def construct_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
        value: Any
        if isinstance(node, yaml.ScalarNode):
            value = loader.construct_scalar(node)
        elif isinstance(node, yaml.SequenceNode):
            value = loader.construct_sequence(node, deep=True)
        else:
            value = loader.construct_mapping(node, deep=True)
        if suffix == "GetAtt" and isinstance(value, str):
            value = value.split(".", 1)
        return {suffix if suffix in ("Ref", "Condition") else f"Fn::{suffix}": value}

    CloudFormationLoader.add_multi_constructor("!", construct_tag)
    try:
        with open(path, encoding="utf-8") as handle:
            document = yaml.load(handle, Loader=CloudFormationLoader)  # noqa: S506 (SafeLoader subclass)
    except OSError as exc:  # the OS's words once: "[Errno 2] No such file or directory: 'x.yaml'" named it twice
        raise TemplateError(f"cannot read {path}: {os_cause(exc)}") from exc
    except yaml.YAMLError as exc:
        raise TemplateError(f"cannot read {path}: {_yaml_problem(exc)}") from exc
    except UnicodeDecodeError as exc:
        raise TemplateError(f"cannot read {path}: not UTF-8 text (byte {exc.start})") from exc
    if not isinstance(document, dict) or not isinstance(document.get("Resources"), dict):
        raise TemplateError(f"{path} has no Resources section")
    return document


def _yaml_problem(exc: Exception) -> str:
    """PyYAML's error in one line, its line and column first (1-based, as PyYAML prints them): its own text is
    several lines, each naming the file again (``in "template.yaml", line 3, column 4``)."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is None or not problem:
        return " ".join(str(exc).split())
    line = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and context_mark is not None:
        line += f" ({context} at line {context_mark.line + 1}, column {context_mark.column + 1})"
    elif context:
        line += f" ({context})"
    return line


def merge_globals(global_properties: dict[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    """SAM's Globals rule: maps merge (the resource wins), lists concatenate, scalars are replaced."""
    merged = dict(global_properties)
    for key, value in properties.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            merged[key] = merge_globals(current, value)
        elif isinstance(current, list) and isinstance(value, list):
            merged[key] = current + value
        else:
            merged[key] = value
    return merged


class Template:
    """A loaded template with parameter values fixed, able to resolve intrinsics."""

    def __init__(self, document: dict[str, Any], path: Path, overrides: dict[str, str] | None = None):
        self.document = document
        self.path = path
        self.resources: dict[str, Any] = document["Resources"]
        self.parameters = self._parameter_values(overrides or {})
        self._conditions: dict[str, Any] = document.get("Conditions") or {}

    @classmethod
    def load(cls, path: Path, overrides: dict[str, str] | None = None) -> Template:
        return cls(load_template(path), path, overrides)

    @property
    def directory(self) -> Path:
        return self.path.parent

    def _parameter_values(self, overrides: dict[str, str]) -> dict[str, str]:
        declared: dict[str, Any] = self.document.get("Parameters") or {}
        unknown = sorted(set(overrides) - set(declared))
        if unknown:
            raise TemplateError(f"unknown parameter(s): {', '.join(unknown)}")
        values: dict[str, str] = {}
        for name, spec in declared.items():
            if name in overrides:
                value = overrides[name]
            elif "Default" in spec:
                value = as_string(spec["Default"])
            else:
                raise TemplateError(f"parameter {name} has no default: pass --param {name}=VALUE")
            allowed = spec.get("AllowedValues")
            if allowed is not None and value not in [as_string(item) for item in allowed]:
                raise TemplateError(f"parameter {name}={value!r} is not one of {allowed}")
            values[name] = value.split(",") if spec.get("Type") == "CommaDelimitedList" else value
        return values

    def function_properties(self, logical_id: str) -> dict[str, Any]:
        """The function's properties over ``Globals.Function``, intrinsics resolved."""
        resource = self.resources.get(logical_id)
        if not isinstance(resource, dict) or resource.get("Type") != SERVERLESS_FUNCTION:
            functions = sorted(key for key, value in self.resources.items() if value.get("Type") == SERVERLESS_FUNCTION)
            raise TemplateError(f"{logical_id} is not a function of {self.path.name}; functions: {', '.join(functions)}")
        global_properties = (self.document.get("Globals") or {}).get("Function") or {}
        return self.resolve(merge_globals(global_properties, resource.get("Properties") or {}))

    def layer_path(self, layer: Any) -> Path | None:
        """Directory to put on ``sys.path`` for a layer of this template (None for an external ARN)."""
        if not (isinstance(layer, str) and self.resources.get(layer, {}).get("Type") == SERVERLESS_LAYER):
            return None
        resource = self.resources[layer]
        content = self.directory / self.resolve(resource["Properties"]["ContentUri"])
        build_method = str((resource.get("Metadata") or {}).get("BuildMethod", ""))
        # `sam build` puts a python or makefile layer's packages into python/; an unbuilt layer already has python/.
        return content if build_method.startswith("python") or build_method == "makefile" else content / "python"

    def resolve(self, value: Any) -> Any:
        """``value`` with every supported intrinsic function evaluated."""
        if isinstance(value, list):
            return [item for item in (self.resolve(entry) for entry in value) if item is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (name, argument), = value.items()
            if name == "Ref" or name.startswith("Fn::") or name == "Condition":
                return self._intrinsic(name, argument)
        resolved = {key: self.resolve(entry) for key, entry in value.items()}
        return {key: entry for key, entry in resolved.items() if entry is not _NO_VALUE}

    def _intrinsic(self, name: str, argument: Any) -> Any:
        match name:
            case "Ref":
                return self._ref(argument)
            case "Fn::GetAtt":
                resource, attribute = argument if isinstance(argument, list) else str(argument).split(".", 1)
                return f"{resource}.{attribute}"
            case "Fn::Sub":
                return self._sub(argument)
            case "Fn::Join":
                separator, items = argument
                return as_string(separator).join(as_string(item) for item in self.resolve(items))
            case "Fn::Split":
                separator, text = argument
                return as_string(self.resolve(text)).split(as_string(separator))
            case "Fn::Select":
                index, items = self.resolve(argument)
                return items[int(index)]
            case "Fn::If":
                condition, when_true, when_false = argument
                return self.resolve(when_true if self.condition(condition) else when_false)
            case "Fn::FindInMap":
                mapping, top, second = self.resolve(argument)
                return self.document["Mappings"][mapping][top][second]
            case "Fn::Equals" | "Fn::Not" | "Fn::And" | "Fn::Or" | "Condition":
                return self._evaluate({name: argument})
        raise TemplateError(f"{name} is not supported by compactor invoke")

    def condition(self, name: str) -> bool:
        """Value of a named condition of the ``Conditions`` section."""
        if name not in self._conditions:
            raise TemplateError(f"unknown condition {name}")
        return self._evaluate(self._conditions[name])

    def _evaluate(self, expression: Any) -> bool:
        (name, argument), = expression.items()
        match name:
            case "Fn::Equals":
                left, right = (as_string(self.resolve(item)) for item in argument)
                return left == right
            case "Fn::Not":
                return not self._evaluate(argument[0])
            case "Fn::And":
                return all(self._evaluate(item) for item in argument)
            case "Fn::Or":
                return any(self._evaluate(item) for item in argument)
            case "Condition":
                return self.condition(argument)
        raise TemplateError(f"{name} is not a condition function")

    def _ref(self, name: str) -> Any:
        if name in self.parameters:
            return self.parameters[name]
        if name == "AWS::NoValue":
            return _NO_VALUE
        pseudo = {
            "AWS::Region": os.environ.get("AWS_REGION", "us-east-1"),
            "AWS::AccountId": "123456789012",
            "AWS::StackName": "compactor-local",
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
        }
        if name in pseudo:
            return pseudo[name]
        if name in self.resources:
            return name
        function, _, alias = name.partition(".")
        if alias == "Alias" and self.resources.get(function, {}).get("Type") == SERVERLESS_FUNCTION:
            return name  # SAM's reference to a function's AutoPublishAlias (an on-failure destination's)
        raise TemplateError(f"Ref to unknown name {name}")

    def _sub(self, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        values = {key: as_string(self.resolve(value)) for key, value in variables.items()}

        def substitute(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in values:
                return values[name]
            if "." in name:
                return self._intrinsic("Fn::GetAtt", name)
            return as_string(self._ref(name))

        return _SUB_VARIABLE.sub(substitute, text).replace("${!", "${")


def as_string(value: Any) -> str:
    """CloudFormation's string form of a scalar (booleans lower-case)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
