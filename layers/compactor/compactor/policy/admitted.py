"""Admitted policies: a checked, normalised Σ_pol Policy term with its encoding and identities."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from functools import cached_property
from typing import Any

from ..identity import fingerprint, sha256_identity
from ..records import record
from .admission import PolicyAdmissionError, check_term
from .encoding import encode
from .failplan import FailPlan
from .fields import FieldDecl, FieldDeclarations, field_schema
from .normal_form import Term, normalize
from .signature import POLICY, PRED

_CONSTRAIN_PREFIX = "ir.constrain: "


@record(frozen=True, eq=False)
class Policy:
    """A normal-form Policy term ``["policy", pred, scorer, selector, xform, failplan]``.

    Equality and hashing follow the canonical encoding, so equivalent submitted terms compare equal.
    """

    term: Term
    fields: Mapping[str, FieldDecl] = field(repr=False)

    @cached_property
    def encoding(self) -> str:
        """``sigma-pol/v2:(policy …)``."""
        return encode(self.term)

    @cached_property
    def identity(self) -> str:
        """SHA-256 of the encoding."""
        return sha256_identity(self.encoding)

    @cached_property
    def fingerprint(self) -> str:
        """The double-hash cache key surfaced as ``policy_fingerprint``."""
        return fingerprint(self.encoding)

    # The term's parts: ["policy", pred, scorer, selector, xform, fail plan].
    pred = property(lambda self: self.term[1], doc="The filter predicate.")
    scorer = property(lambda self: self.term[2], doc="The score expression.")
    selector = property(lambda self: self.term[3], doc="The rank/selection term.")
    xform = property(lambda self: self.term[4], doc="The tie-break transform.")

    @cached_property
    def fail_plan(self) -> FailPlan:
        return FailPlan.from_term(self.term[5])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Policy) and other.encoding == self.encoding

    def __hash__(self) -> int:
        return hash(self.encoding)


def admit_policy(term: Any, *, fields: FieldDeclarations | None = None) -> Policy:
    """Check ``term`` as a Policy under the core fields plus ``fields``, and normalise it.

    Raises :class:`PolicyAdmissionError` (message ``ir: <path>: <reason>``).
    """
    schema = field_schema(fields)
    check_term(term, schema, sort=POLICY)
    return Policy(normalize(term), schema)


def _check_envelope(term: Any, schema: Mapping[str, FieldDecl]) -> None:
    try:
        check_term(term, schema, sort=PRED)
    except PolicyAdmissionError as exc:
        raise PolicyAdmissionError(_CONSTRAIN_PREFIX + str(exc).removeprefix("ir: ")) from exc


def admit_pred(term: Any, *, fields: FieldDeclarations | None = None) -> Term:
    """Check a host envelope as a Pred and return its normal form (``ir.constrain: `` errors)."""
    _check_envelope(term, field_schema(fields))
    return normalize(term)


def with_envelope(policy: Policy, envelope_pred: Any) -> Policy:
    """``pred := and(envelope, pred)``, renormalised: callers can narrow the host, never widen it.

    A ``None`` envelope returns the policy unchanged; an inadmissible one raises
    :class:`PolicyAdmissionError` with an ``ir.constrain: `` message.
    """
    if envelope_pred is None:
        return policy
    _check_envelope(envelope_pred, policy.fields)
    composed = ["policy", ["and", envelope_pred, policy.pred], *policy.term[2:]]
    return Policy(normalize(composed), policy.fields)
