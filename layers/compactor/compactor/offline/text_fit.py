"""Byte-exact text fitting for the built-in offers: UTF-8 safe cuts, elisions and labelled sections.

Every limit here is in UTF-8 bytes. Cuts never split a character, and an elision is marked with
``…`` (3 bytes), so a fitted text is always valid UTF-8 and never longer than its limit.
"""

from __future__ import annotations

from compactor.patterns import pattern
from compactor.records import record

ELLIPSIS = "…"
_ELLIPSIS_BYTES = len(ELLIPSIS.encode("utf-8"))
_WHITESPACE = pattern(r"\s+")
# A section whose body would get fewer bytes than this is dropped rather than shown as a stub.
_MIN_USEFUL_BODY = 24


def utf8_len(text: str) -> int:
    """UTF-8 byte length of ``text``."""
    return len(text.encode("utf-8"))


def utf8_prefix(text: str, limit: int) -> str:
    """The longest prefix of ``text`` within ``limit`` bytes that ends on a character boundary."""
    if limit <= 0:
        return ""
    # The first ``limit`` bytes lie inside the first ``limit`` characters: encode only those.
    return text[:limit].encode("utf-8")[:limit].decode("utf-8", "ignore")


def utf8_suffix(text: str, limit: int) -> str:
    """The longest suffix of ``text`` within ``limit`` bytes that starts on a character boundary."""
    if limit <= 0:
        return ""
    return text[-limit:].encode("utf-8")[-limit:].decode("utf-8", "ignore")


def squeeze(text: str) -> str:
    """Collapse every run of whitespace (newlines included) to one space and strip the ends."""
    return _WHITESPACE.sub(" ", text).strip()


def fit_end(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` bytes, else its head followed by ``…``."""
    if utf8_len(text) <= limit:
        return text
    if limit < _ELLIPSIS_BYTES + 1:
        return utf8_prefix(text, limit)
    return utf8_prefix(text, limit - _ELLIPSIS_BYTES) + ELLIPSIS


def fit_middle(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` bytes, else its head and tail joined by ``…``."""
    if utf8_len(text) <= limit:
        return text
    if limit < _ELLIPSIS_BYTES + 2:
        return utf8_prefix(text, limit)
    room = limit - _ELLIPSIS_BYTES
    head = utf8_prefix(text, room - room // 2)
    tail = utf8_suffix(text, limit - _ELLIPSIS_BYTES - utf8_len(head))
    return head + ELLIPSIS + tail


def fit_items(text: str, separator: str, limit: int) -> str:
    """``text`` (items joined by ``separator``) if it fits, else its leading whole items and ``…``."""
    if utf8_len(text) <= limit:
        return text
    head = utf8_prefix(text, limit - _ELLIPSIS_BYTES)
    cut = head.rfind(separator)
    if cut <= 0:
        return fit_end(text, limit)
    return head[:cut] + separator + ELLIPSIS


def squeezed_window(text: str, limit: int) -> str:
    """Whitespace-squeezed head/tail view of a possibly huge ``text`` that still shows at least
    ``limit`` bytes of head and of tail, without squeezing the whole text.

    Only about ``2 × limit`` characters at each end are looked at, so the cost does not grow with
    the size of ``text``.
    """
    window = 2 * max(limit, 1) + 16
    if len(text) <= 2 * window:
        return squeeze(text)
    return squeeze(text[:window]) + " " + ELLIPSIS + " " + squeeze(text[-window:])


@record(frozen=True)
class Section:
    """One line of a summary: ``label: body`` (or just ``body`` when the label is empty).

    ``share`` is the fraction of the limit the section is guaranteed first; a section with
    ``grows=False`` never takes more than that share. ``elide_middle`` keeps the head and the tail
    of the body (outputs) instead of only the head (commands); a body that is a list joined by
    ``separator`` is cut between items, never inside one.
    """

    label: str
    body: str
    share: float
    elide_middle: bool = False
    grows: bool = True
    separator: str | None = None

    @property
    def overhead(self) -> int:
        """Bytes of the label, its ``": "`` and the line's newline."""
        return utf8_len(self.label) + 2 + 1 if self.label else 1

    def render(self, body_limit: int) -> str:
        if self.separator:
            body = fit_items(self.body, self.separator, body_limit)
        elif self.elide_middle:
            body = fit_middle(self.body, body_limit)
        else:
            body = fit_end(self.body, body_limit)
        return f"{self.label}: {body}" if self.label else body


def fit_sections(sections: list[Section], limit: int) -> str:
    """Render ``sections`` (given in priority order) as newline-separated lines within ``limit`` bytes.

    Pass 1 gives each section with a share, in priority order, up to that share of the limit; pass 2 hands
    the bytes left over to the growing sections that still want more, again in priority order. A section
    that cannot get a useful amount of room is left out; lines keep their given order.
    """
    live = [section for section in sections if section.body]
    remaining = limit + 1  # every line pays one newline, the last line does not need it
    allowance = [0] * len(live)
    needs = [section.overhead + utf8_len(section.body) for section in live]
    minimums = [section.overhead + min(need - section.overhead, _MIN_USEFUL_BODY)
                for section, need in zip(live, needs)]
    for index, section in enumerate(live):
        want = min(needs[index], max(minimums[index], int(section.share * limit)))
        if section.share > 0 and want <= remaining:
            allowance[index] = want
            remaining -= want
    for index, section in enumerate(live):
        extra = min(needs[index] - allowance[index], remaining)
        if not section.grows or (allowance[index] == 0 and extra < minimums[index]):
            continue
        allowance[index] += extra
        remaining -= extra
    lines = [section.render(allowance[index] - section.overhead)
             for index, section in enumerate(live) if allowance[index]]
    return "\n".join(lines)
