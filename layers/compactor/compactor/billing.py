"""The usage ledger (docs/billing.md): one entry per billed call, written exactly once, and its daily totals.

Ports and the local adapter live here, in plain Python: :class:`UsageLedger` is what the front doors
write to and the usage route reads; :class:`LocalLedger` keeps entries in memory or in a JSON-lines
file (``compactor serve``, ``compactor usage --ledger``, tests). The DynamoDB adapter is
``compactor_aws.ledger``. Nothing here knows about HTTP or AWS.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Protocol

from compactor.call_record import FLOW_MODE
from compactor.records import record

logger = logging.getLogger(__name__)

MAX_RANGE_DAYS = 366
"""Longest ``from``..``to`` span the usage route answers (both days included)."""
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
"""``YYYY-MM-DD`` in ASCII digits: ``date.fromisoformat`` alone also takes ISO week dates (``2026-W01-1``)."""

COST_QUANTUM = Decimal("1e-15")
"""What a call's cost adds to its day's totals is rounded to this (reports show 10 decimals): a DynamoDB
number holds 38 significant digits, which a sum of costs of very different sizes could otherwise pass."""
REPORTED_COST_DECIMALS = 10
"""A day's ``cost_usd`` in the reports (``GET /v1/usage``, ``compactor usage``) is rounded to this."""

BILLED_FACTS = ("route", "mode", "bytes_in", "bytes_out", "model_calls", "cost_usd")
"""What a front door passes about a call (see :func:`billing_facts`); the rest comes from the request."""


class UsageRangeError(ValueError):
    """A ``from``/``to`` pair the usage route cannot answer (the message says why)."""


@record(frozen=True)
class LedgerEntry:
    """One billed call.

    ``entry_id`` is what makes the write happen once: derived from the computation of an idempotency key
    (the key's scope, caller and route, and the computation's time, kept in its idempotency record), the
    S3 object version, or the API request id. ``time`` is the call's own time (ISO 8601 UTC), kept in the
    stored response so that a replay writes the same entry.
    """

    entry_id: str
    api_key_id: str
    request_id: str | None
    time: str
    route: str
    mode: str
    bytes_in: int | None
    bytes_out: int | None
    model_calls: int
    cost_usd: float | None  # None: at least one model call's cost is unknown
    idempotency_key: str | None = None

    @property
    def day(self) -> str:
        return self.time[:10]

    @property
    def bytes_saved(self) -> int | None:
        """Transcript bytes in minus out: a compaction's; None for a ``/v1/flows`` call, whose bytes are its HTTP
        bodies (as its billing line says, ``compactor_aws.observability.summarize``). The day's totals used to add a
        flow's request size minus its response size, often negative, to the compactions' savings."""
        if self.bytes_in is None or self.bytes_out is None or self.mode == FLOW_MODE:
            return None
        return self.bytes_in - self.bytes_out

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LedgerEntry:
        names = cls.__dataclass_fields__
        return cls(**{name: data.get(name) for name in names})


def billing_facts(*, route: str, mode: str, bytes_in: int | None, bytes_out: int | None, model_calls: int,
                  cost_usd: float | None, time: str | None = None) -> dict[str, Any]:
    """The facts of one call that its ledger entry records, as a small JSON-able dict.

    Front doors build it from the call's record and keep it with the stored response, so a replay
    can write the entry the first attempt may not have written. ``time``, when given, is the UTC time the
    call was observed (its billing line's ``time``): the entry's time, and so its day (:func:`call_time`).
    """
    facts: dict[str, Any] = {"route": route, "mode": mode, "bytes_in": bytes_in, "bytes_out": bytes_out,
                             "model_calls": int(model_calls), "cost_usd": cost_usd}
    if time is not None:
        facts["time"] = time
    return facts


def call_time(facts: Mapping[str, Any] | None) -> str:
    """The time a billed call's entry is written under: the time its facts say it was observed (the one its
    billing line carries), else now. The entry's day, and so the day ``GET /v1/usage`` counts it on, is that
    time's UTC date: the day its billing line and call metrics were written, also for a call that ran across
    midnight (docs/billing.md)."""
    time = facts.get("time") if facts else None
    return time if isinstance(time, str) else utc_now_iso()


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def make_entry(*, entry_id: str, api_key_id: str, facts: Mapping[str, Any], time: str,
               request_id: str | None = None, idempotency_key: str | None = None) -> LedgerEntry:
    return LedgerEntry(entry_id=entry_id, api_key_id=api_key_id, request_id=request_id, time=time,
                       idempotency_key=idempotency_key, **{name: facts.get(name) for name in BILLED_FACTS})


RESULT_BILL_META = "compactor-bill"
"""The user metadata (``x-amz-meta-compactor-bill``) of an inline S3 job's result object: :class:`ResultBill`."""


@record(frozen=True)
class ResultBill:
    """What a delivered S3 job is billed (docs/billing.md): its facts (:func:`billing_facts`, with the ``time`` it was
    observed: the entry's day), the caller billed and the request id of the attempt that computed it. The job keeps it
    in its object version's idempotency record and writes it with its result (:meth:`metadata`), so that whichever step
    finds the result written (a retry after a crash between writing it and billing it, the on-failure destination after
    the record expired or was left in progress) writes the very entry the job would have: ``s3:<version hash>`` on the
    same day, to the same caller, which the ledger's conditional write keeps once."""

    facts: Mapping[str, Any]
    caller: str
    request_id: str | None = None

    @property
    def time(self) -> str:
        return call_time(self.facts)

    def metadata(self) -> dict[str, str]:
        """The result object's user metadata holding this bill: one ASCII JSON value (S3 metadata is ASCII)."""
        return {RESULT_BILL_META: json.dumps({"facts": dict(self.facts), "caller": self.caller,
                                              "request_id": self.request_id}, separators=(",", ":"))}

    @classmethod
    def of_metadata(cls, metadata: Mapping[str, str] | None) -> ResultBill | None:
        """The bill a result object's metadata holds (:meth:`metadata`), None when it holds none (a result written by a
        version before this metadata, a windowed job's, a failure) or none that reads as one."""
        try:
            data = json.loads((metadata or {})[RESULT_BILL_META])
            facts, caller, request_id = data["facts"], data["caller"], data.get("request_id")
        except (KeyError, TypeError, ValueError):
            return None
        if not (isinstance(facts, dict) and isinstance(caller, str) and caller
                and isinstance(facts.get("time"), str) and isinstance(facts.get("route"), str)
                and isinstance(facts.get("model_calls"), int) and (request_id is None or isinstance(request_id, str))):
            return None
        return cls({name: facts.get(name) for name in (*BILLED_FACTS, "time")}, caller, request_id)


def cost_share(cost: float) -> Decimal:
    """What a call's known cost adds to its day's totals, exactly: its shortest decimal rounded to
    :data:`COST_QUANTUM` (a cost too large to round within the decimal context's 28 digits is kept as it is).
    Every ledger sums these decimals (DynamoDB's ``ADD`` does too), so the reports of the same calls agree to
    the last digit whichever ledger holds them."""
    exact = Decimal(repr(float(cost)))
    try:
        return exact.quantize(COST_QUANTUM)
    except InvalidOperation:
        return exact


# --------------------------------------------------------------------------------------------- ports


class UsageLedger(Protocol):
    def record(self, entry: LedgerEntry) -> bool:
        """Write ``entry`` unless an entry with its ``entry_id`` exists; True when this call wrote it."""
        ...

    def entries(self, first_day: str, last_day: str, api_key_id: str | None = None) -> Iterator[LedgerEntry]:
        """Entries of days ``first_day``..``last_day`` (inclusive), of one key or (operator) every key."""
        ...

    def totals(self, first_day: str, last_day: str, api_key_id: str | None = None) -> dict[str, list[DayTotals]]:
        """:func:`totals_by_key` of those entries (what ``GET /v1/usage`` and ``compactor usage`` report),
        however the ledger keeps them: a DynamoDB ledger reads its daily totals, not every entry."""
        ...


# ------------------------------------------------------------------------------------------- totals


@record
class DayTotals:
    """What ``GET /v1/usage`` answers for one day (and ``compactor usage`` per key and day)."""

    day: str
    calls: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    bytes_saved: int = 0
    model_calls: int = 0
    cost_usd: Decimal = Decimal(0)  # of the calls whose cost is known, summed exactly (:func:`cost_share`)
    calls_cost_unknown: int = 0

    def add(self, entry: LedgerEntry) -> None:
        self.calls += 1
        self.bytes_in += entry.bytes_in or 0
        self.bytes_out += entry.bytes_out or 0
        self.bytes_saved += entry.bytes_saved or 0
        self.model_calls += entry.model_calls or 0
        if entry.cost_usd is None:
            self.calls_cost_unknown += 1
        else:
            self.cost_usd += cost_share(entry.cost_usd)

    def add_totals(self, other: DayTotals) -> None:
        """Count ``other``'s calls (of the same day) in these totals."""
        for name in TOTALED:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @classmethod
    def of(cls, entry: LedgerEntry) -> DayTotals:
        """The totals of ``entry``'s one call: what the call adds to its day's."""
        totals = cls(entry.day)
        totals.add(entry)
        return totals

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        try:  # the exact decimal sum, rounded once: a sum of floats drifted (10,000 calls of $0.1: 1000.0000000002)
            out["cost_usd"] = float(round(self.cost_usd, REPORTED_COST_DECIMALS))
        except InvalidOperation:  # past the decimal context's 28 digits
            out["cost_usd"] = float(self.cost_usd)
        return out


TOTALED = ("calls", "bytes_in", "bytes_out", "bytes_saved", "model_calls", "cost_usd", "calls_cost_unknown")
"""What :class:`DayTotals` sums, the names a ledger's stored totals use too (``compactor_aws.ledger``)."""


def daily_totals(entries: Iterable[LedgerEntry]) -> list[DayTotals]:
    """Totals per day, days in order; days without calls are left out."""
    days: dict[str, DayTotals] = {}
    for entry in entries:
        days.setdefault(entry.day, DayTotals(entry.day)).add(entry)
    return [days[day] for day in sorted(days)]


def totals_by_key(entries: Iterable[LedgerEntry]) -> dict[str, list[DayTotals]]:
    """The operator's view: :func:`daily_totals` of each API key id."""
    grouped: dict[str, list[LedgerEntry]] = {}
    for entry in entries:
        grouped.setdefault(entry.api_key_id, []).append(entry)
    return {key: daily_totals(grouped[key]) for key in sorted(grouped)}


def parse_range(first: str | None, last: str | None, *, today: date | None = None) -> tuple[str, str]:
    """``from``/``to`` (``YYYY-MM-DD``, both included) checked; absent ``to`` is today, absent ``from``
    is ``to``'s first day of the month. Raises :class:`UsageRangeError` naming every bad one: with both bad it
    named ``to`` alone, and a caller who fixed it met the other on the next call."""
    problems: list[str] = []

    def day(value: str | None, name: str) -> date | None:
        try:
            if value is None or not _DAY.fullmatch(value):
                raise ValueError
            return date.fromisoformat(value)
        except ValueError:
            problems.append(f"{name} must be a date YYYY-MM-DD")
            return None

    start = day(first, "from") if first else None
    end = day(last, "to") if last else (today or datetime.now(timezone.utc).date())
    if problems or end is None:
        raise UsageRangeError("; ".join(problems))
    start = start or end.replace(day=1)
    if start > end:
        raise UsageRangeError("from must not be after to")
    if end - start >= timedelta(days=MAX_RANGE_DAYS):
        raise UsageRangeError(f"the range spans more than {MAX_RANGE_DAYS} days")
    return start.isoformat(), end.isoformat()


def usage_body(api_key_id: str, first_day: str, last_day: str, ledger: UsageLedger) -> dict[str, Any]:
    """The ``GET /v1/usage`` body: one caller's totals per day (never another key's)."""
    days = ledger.totals(first_day, last_day, api_key_id).get(api_key_id, [])
    return {"from": first_day, "to": last_day, "days": [totals.as_dict() for totals in days]}


# ------------------------------------------------------------------------------------- local adapter


@record
class LocalLedger:
    """A :class:`UsageLedger` appended to a JSON-lines file when ``path`` is set, else in memory.

    With a file, the file is the ledger: the object keeps only what ``record`` de-duplicates against, the
    ids of the entries the file held when it was opened and of those it wrote since, never the entries
    (every query re-reads the file, so ``compactor usage --ledger`` sees what a running server wrote).
    Several processes append to one file (the workers of ``compactor serve --workers N``); each
    de-duplicates its own writes (and what the file held when it opened it), so a replay that lands on
    another worker may append its entry's line once more. Reads de-duplicate by entry id, so every total
    counts an entry once. The lock makes ``record`` atomic between a process's threads. In memory (no
    ``path``: tests, a server run in-process) the entries are the ledger and are kept.
    Until issue 11's fourteenth round a file's ledger also kept every entry in memory for as long as the
    process ran (about 340 bytes each, in each worker).
    """

    path: Path | None = None
    _ids: set[str] = field(default_factory=set, repr=False)
    _kept: list[LedgerEntry] = field(default_factory=list, repr=False)  # without a file only
    _skipped: list[int] = field(default_factory=list, repr=False)  # the line numbers last logged as no entry
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.path is not None:
            self.path = Path(self.path)
            self._ids = {entry.entry_id for entry in self._read()}

    def _read(self) -> Iterator[LedgerEntry]:
        """The file's entries; a line that is no entry (the torn last line of a write a crash or a full disk
        cut short: its call was never answered, and a keyed retry writes it again) is skipped. What was skipped
        is logged once per read, in one line, and only when it changed since this object last said so (a server
        re-reads the file on every report): a file that is no ledger used to log a line per line of it."""
        if self.path is None or not self.path.exists():
            return
        skipped: list[int] = []
        with self.path.open(encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    entry = LedgerEntry.from_dict(json.loads(line))
                    if not all(isinstance(text, str) for text in (entry.entry_id, entry.api_key_id, entry.time)):
                        raise ValueError("not an entry")
                except (ValueError, TypeError, AttributeError):
                    skipped.append(number)
                    continue
                yield entry
        if skipped and skipped != self._skipped:
            self._skipped = skipped
            if len(skipped) == 1:
                logger.warning("usage ledger %s: line %d is no entry (a write cut short?); skipped",
                               self.path, skipped[0])
            else:
                logger.warning("usage ledger %s: %d lines are not ledger entries (the first: line %d); skipped",
                               self.path, len(skipped), skipped[0])

    def reads_as_ledger(self) -> bool:
        """Whether the file is a ledger: absent, blank, or holding at least one entry. A torn line among
        entries is skipped (:meth:`_read`); a file none of whose lines is an entry (a transcript named by
        mistake) is no ledger."""
        return bool(self._ids) or self.path is None or not self.path.exists() or not self.path.read_bytes().strip()

    def _append(self, entry: LedgerEntry) -> None:
        """Append ``entry``'s line, on a line of its own: after a torn last line, a newline first."""
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(entry.as_dict(), separators=(",", ":")) + "\n"
        with self.path.open("a+b") as out:
            size = out.seek(0, os.SEEK_END)
            if size:
                out.seek(size - 1)
                if out.read(1) != b"\n":
                    line = "\n" + line
            out.write(line.encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())

    def record(self, entry: LedgerEntry) -> bool:
        with self._lock:
            if entry.entry_id in self._ids:
                return False
            if self.path is not None:
                self._append(entry)
            else:
                self._kept.append(entry)
            self._ids.add(entry.entry_id)
            return True

    def entries(self, first_day: str, last_day: str, api_key_id: str | None = None) -> Iterator[LedgerEntry]:
        with self._lock:
            source = list(self._read()) if self.path is not None else list(self._kept)
        seen: set[str] = set()
        for entry in source:
            if entry.entry_id in seen or not first_day <= entry.day <= last_day:
                continue
            seen.add(entry.entry_id)
            if api_key_id is None or entry.api_key_id == api_key_id:
                yield entry

    def totals(self, first_day: str, last_day: str, api_key_id: str | None = None) -> dict[str, list[DayTotals]]:
        return totals_by_key(self.entries(first_day, last_day, api_key_id))
