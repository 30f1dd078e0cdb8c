"""The catalog's models are built from annotations evaluated where they stand: pydantic then has no string to
evaluate for each of their fields (docs/performance.md#the-workers-cold-start-sixth-round-issue-11). What the
models accept and reject is held by the catalog's own tests."""

from __future__ import annotations


def test_the_catalog_models_annotations_are_types_not_strings() -> None:
    from compactor import catalog

    for model in (catalog.OfferSpec, catalog.CatalogSpec):
        annotations = model.__dict__["__annotations__"]
        assert annotations and not [name for name, kind in annotations.items() if isinstance(kind, str)], model
