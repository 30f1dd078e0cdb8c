"""The layer's build refuses a catalog whose offer names its API key by ``api_key_env`` alone (docs/deploy.md "Real
model providers and their keys"): template.yaml gives the functions no provider key variable, so every call of such
an offer would fail ``auth_error`` and every compaction would quietly keep its units. A catalog checked with
``compactor doctor`` in a shell that has the variable passed, then deployed, and nothing failed until the first
compaction fell back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

LAYER = Path(__file__).resolve().parents[2] / "layers" / "compactor"
REPO = LAYER.parents[1]


def make_catalog(tmp_path: Path, catalog: Path) -> subprocess.CompletedProcess[str]:
    python = tmp_path / "artifacts" / "python"
    python.mkdir(parents=True, exist_ok=True)
    if not (python / "compactor").exists():
        (python / "compactor").symlink_to(LAYER / "compactor")
    return subprocess.run(["make", "-s", "-C", str(LAYER), "catalog", f"ARTIFACTS_DIR={python.parent}",
                           f"PYTHON={sys.executable}", f"CATALOG={catalog}"], capture_output=True, text=True)


def offer(**fields: object) -> dict[str, object]:
    return {"id": "openai/summarizer", "provider": "openai", "family": "gpt-4.1-mini", "model": "gpt-4.1-mini",
            "protocol": "chat", "transport": "openai", "base_url": "https://api.openai.com/v1",
            "price_in": 0.4, "price_out": 1.6, "price_cached_in": 0.1, "supports_json_mode": True, **fields}


def test_an_offer_whose_key_only_a_variable_names_fails_the_build(tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"offers": [offer(api_key_env="OPENAI_API_KEY")]}))
    built = make_catalog(tmp_path, catalog)
    assert built.returncode != 0
    assert "offer 'openai/summarizer'" in built.stderr and "OPENAI_API_KEY" in built.stderr
    assert "api_key_secret" in built.stderr


def test_offers_with_a_secret_or_needing_no_key_build(tmp_path: Path) -> None:
    for name in ("openai.json", "bedrock.json", "local-openai-compatible.json"):  # the worked catalogs
        assert make_catalog(tmp_path, REPO / "docs" / "catalogs" / name).returncode == 0, name
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"offers": [offer(api_key_secret="compactor/openai")]}))
    assert make_catalog(tmp_path, catalog).returncode == 0
