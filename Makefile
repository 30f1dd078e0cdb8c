# Compactor developer entry points. Every target installs what it needs itself.
SHELL := /bin/bash
export PYENV_VERSION ?= 3.12.1:3.11.7:3.13.0
export SAM_CLI_TELEMETRY := 0

# The Lambda runtime's Python (3.12) when available (pyenv needs PYENV_VERSION in $(shell) too), else python3.
ifndef PYTHON
PYTHON := $(shell PYENV_VERSION=$(PYENV_VERSION) python3.12 -c 'print("python3.12")' 2>/dev/null || echo python3)
endif
VENV := .venv
TOOLS := .venv-tools
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TOOLS_STAMP := $(TOOLS)/.installed
DEMO_TRANSCRIPT ?= tests/fixtures/corpus/msa-v2-toolcalls_deepseek-chat_pydicom-901.json
DEMO_OUT ?= out/demo-compacted.json

.PHONY: install tools demo test unit lint-template build bench eval clean

$(STAMP): pyproject.toml layers/compactor/requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# aws-sam-cli pins boto3, click and pydantic: it lives in its own virtualenv.
$(TOOLS_STAMP): infra/tools-requirements.txt
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet --upgrade pip
	$(TOOLS)/bin/python -m pip install --quiet -r infra/tools-requirements.txt
	touch $(TOOLS_STAMP)

tools: $(TOOLS_STAMP)

demo: $(STAMP)
	@mkdir -p $(dir $(DEMO_OUT))
	$(VENV)/bin/compactor compact $(DEMO_TRANSCRIPT) --output $(DEMO_OUT)
	@echo "compacted transcript written to $(DEMO_OUT)"

unit: $(STAMP)
	$(PY) -m pytest -q

lint-template: $(TOOLS_STAMP)
	$(TOOLS)/bin/sam validate --lint --template template.yaml --region us-east-1
	$(TOOLS)/bin/cfn-lint --append-rules cfn_lint_serverless.rules -- template.yaml

test: unit lint-template

build: $(TOOLS_STAMP)
	$(TOOLS)/bin/sam build --template template.yaml

# Every benchmark runs; the target fails at the end if any missed its goal (docs/performance.md).
bench: $(STAMP)
	@failed=""; for b in tests/benchmarks/*.py; do echo "== $$b"; $(PY) $$b || failed="$$failed $$b"; done; \
	if [ -n "$$failed" ]; then echo "goals missed:$$failed"; exit 1; fi

# Compaction quality per method on the corpus (docs/evaluation.md): offline, a few seconds.
EVAL_CORPUS ?= tests/fixtures/corpus
eval: $(STAMP)
	$(VENV)/bin/compactor eval $(EVAL_CORPUS)

clean:
	rm -rf $(VENV) $(TOOLS) .aws-sam out .pytest_cache
