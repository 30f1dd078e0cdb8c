"""The Σ_pol policy algebra (``sigma-pol/v2``): admission, normal form, encoding and ranking."""

from .admission import PolicyAdmissionError
from .admitted import Policy, admit_policy, admit_pred, with_envelope
from .defaults import DEFAULT_CHAT_POLICY, DEFAULT_DECISIONS_POLICY
from .encoding import encode, encode_number
from .failplan import Action, FailPlan
from .fields import CORE_FIELDS, FieldDecl
from .ranking import RankedOffer, Ranking, Rejection, Requirements, rank
from .trace import trim_decision_trace

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
