"""The Σ_pol policy algebra (``sigma-pol/v2``): admission, normal form, encoding and ranking."""

from compactor.policy.admission import PolicyAdmissionError
from compactor.policy.admitted import Policy, admit_policy, admit_pred, with_envelope
from compactor.policy.defaults import DEFAULT_CHAT_POLICY, DEFAULT_DECISIONS_POLICY
from compactor.policy.encoding import encode, encode_number
from compactor.policy.failplan import Action, FailPlan
from compactor.policy.fields import CORE_FIELDS, FieldDecl
from compactor.policy.ranking import RankedOffer, Ranking, Rejection, Requirements, rank
from compactor.policy.trace import trim_decision_trace

__all__ = [
    "CORE_FIELDS",
    "DEFAULT_CHAT_POLICY",
    "DEFAULT_DECISIONS_POLICY",
    "Action",
    "FailPlan",
    "FieldDecl",
    "Policy",
    "PolicyAdmissionError",
    "RankedOffer",
    "Ranking",
    "Rejection",
    "Requirements",
    "admit_policy",
    "admit_pred",
    "encode",
    "encode_number",
    "rank",
    "trim_decision_trace",
    "with_envelope",
]
