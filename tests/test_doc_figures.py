"""Every performance figure quoted in README.md and docs/*.md is one the results page holds.

The results page is benchmarks/RESULTS.md, generated from benchmarks/results/*.json
(``tests/test_bench.py`` checks that the committed page is the generated one). The rule:

**What is a figure.** In prose (outside fenced and indented code blocks, `code spans`, link
targets and HTML comments), in a *sentence* (a paragraph or list item split after ``.``, ``!`` or
``?`` and a space before a capital; a table row is one sentence, with the links of the paragraph
just before its table), a figure is

1. a number, or numbers joined by ``-``, ``to`` or ``/`` (``1.2-1.5``, ``3 to 4``,
   ``12.3 / 1.8``), directly followed by a performance unit: ``x`` (a ratio: ``1.9x``, not
   ``3x3``), ``%``, ``GB/s`` (``MB/s``, ``TB/s``, ``GiB/s``), ``GFLOP/s``, ``TFLOP/s``,
   ``TOPS``, ``tokens/s``, ``tok/s``, ``images/s``, ``steps/s``, ``samples/s``, ``ms``, ``us``
   or ``s`` (after a space); or
2. any other number with a fractional part or thousands separators (``0.94``, ``1,472``; not
   ``3``, not a version ``0.11.2``) in a sentence that holds a figure of the first kind or names
   the copy or the roofline, and in every table row: ratios to the copy, the second number of
   ``X ms against Y`` and a table's cells are quoted without a unit.

**When the page holds it.** A figure is held when

(a) it has a unit and its text, numbers and unit as written (``4140 GB/s``), occurs on the page;
    or
(b) its sentence names a section of the page (``RESULTS.md#<suite>``, in a link or in code; a
    section the page has) and every number of the figure, as printed (thousands separators
    aside; no rounding: ``1.2`` is not ``1.21``, ``752k`` is not ``752,441``; no ratio worked out
    from two of the page's numbers), occurs in one such section, outside the section's header
    line (device, versions, date, commit).

Anything else fails, with its file, line and sentence. benchmarks/HISTORY.md (a log of past
rounds) is not checked. ``NOT_FIGURES`` lists the few numbers of that form that measure no
performance (a gradient's factor, an upsampling's scale, a count, a default, a test's limit),
each with the reason; each must still occur in its file's prose, so the list cannot outlive the
text.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "benchmarks" / "RESULTS.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# (file relative to the root, the text as it stands) -> why it is no performance figure.
NOT_FIGURES: dict[tuple[str, str], str] = {
    ("docs/semantics.md", "| REDUCE SUM_SQUARE | 2x |"): "a gradient: twice the input",
    ("docs/semantics.md", "every element of 2x and 4x at 1 GiB"): "upsampling scales",
    ("docs/semantics.md", "29% of 200k random quotients"): "a count of inexact quotients",
    ("docs/networks.md", "62.5% of the square"): "the share of the tiles computed, by design",
    ("docs/cli.md", "80% of the device's memory limit"): "a default limit",
    ("docs/graphs.md", "the test allows 10 s"): "a test's time limit",
    ("docs/onnx.md", "2,033 cases 46 (2.3%)"): "a count of test cases",
    ("docs/semantics.md", "not the 0.5 that autodiff of max/min gives"): "a derivative's value",
    ("docs/semantics.md", "autodiff of a max would give 0.5 at 0"): "a derivative's value",
    ("docs/semantics.md", "[0, 0.5, 0.5, 0]"): "a worked gradient",
}

_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?k?|\d+(?:\.\d+)?k?"
_JOIN = r"\s*(?:-|–|\bto\b|/)\s*"
_UNIT = (
    r"x(?![\w^])|%|\s?(?:[GTM]B/s|GiB/s|GFLOP/s|TFLOP/s|TOPS\b|tokens/s|tok/s|images/s"
    r"|steps/s|samples/s|ms\b|us\b|µs\b)|\ss\b(?!/)"
)
# A figure of the first kind: numbers (not glued to a word, a dot or a comma before them).
_WITH_UNIT = re.compile(
    rf"(?<![\w.,/])(?P<nums>(?:{_NUMBER})(?:{_JOIN}(?:{_NUMBER}))*)(?P<unit>{_UNIT})"
)
_BARE = re.compile(r"(?<![\w.,/])(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+\.\d+)(?!\w|\.\d|,\d)")
_NUM_TOKEN = re.compile(rf"(?<![\w.,])(?:{_NUMBER})(?![\w])")
_COPY_WORDS = re.compile(r"\bcopy\b|\broofline\b", re.IGNORECASE)
_LINK = re.compile(r"RESULTS\.md#([\w-]+)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[`*])")


@dataclasses.dataclass(frozen=True)
class Sentence:
    """A sentence of prose: its text (code left out, white space as single spaces), the line it
    starts on, and the page sections it links."""

    text: str
    line: int
    links: tuple[str, ...]
    table: bool = False  # a table row: every number with a fractional part is a figure


@dataclasses.dataclass(frozen=True)
class Figure:
    text: str  # as written, e.g. "1.06-12.9x"
    numbers: tuple[str, ...]  # as printed, thousands separators dropped
    unit: str  # "" for the second kind
    start: int  # where it starts in its sentence's text


@dataclasses.dataclass(frozen=True)
class Problem:
    file: str
    line: int
    figure: str
    sentence: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.figure!r} is not on the page: {self.sentence}"


def _normal(number: str) -> str:
    return number.replace(",", "")


def _prose(text: str) -> str:
    """Inline text without code spans, HTML comments and link targets (links are read apart,
    by ``_links``), white space as single spaces."""
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.DOTALL)
    text = re.sub(r"`[^`]*`", " ", text)
    return re.sub(r"\s+", " ", re.sub(r"\]\([^)]*\)", "]", text)).strip()


def _links(text: str) -> tuple[str, ...]:
    return tuple(_LINK.findall(text))


def _blocks(markdown: str) -> list[tuple[int, str, list[str]]]:
    """(first line's number, kind, lines) of each block: a ``"table"``, code (``"fenced"``, or
    ``"code"``: indented by four spaces after a blank line) or ``"text"`` (a paragraph, a list
    item or a heading)."""
    blocks: list[tuple[int, str, list[str]]] = []
    fence = None
    for number, line in enumerate(markdown.split("\n"), 1):
        stripped = line.strip()
        last = blocks[-1] if blocks else None
        if fence is not None:
            fence = None if stripped.startswith(fence) else fence
            last[2].append(line)
        elif stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            blocks.append((number, "fenced", [line]))
        elif not stripped:
            blocks.append((number, "blank", []))
        else:
            kind = "table" if stripped.startswith("|") else "text"
            starts = re.match(r"\s*(?:[-*+]|\d+\.)\s|#", line) is not None
            after_blank = last is None or last[1] == "blank"
            indented = line.startswith("    ") and not starts
            if indented and (after_blank or (last is not None and last[1] == "code")):
                kind = "code"
            if (
                last is not None
                and last[1] == kind
                and not (kind == "text" and (starts or last[2][0].lstrip().startswith("#")))
            ):
                last[2].append(line)
            else:
                blocks.append((number, kind, [line]))
    return [b for b in blocks if b[1] != "blank"]


def sentences(markdown: str) -> list[Sentence]:
    """The prose sentences of a Markdown text (see the module's docstring)."""
    out: list[Sentence] = []
    caption: tuple[str, ...] = ()
    for start, kind, lines in _blocks(markdown):
        if kind in ("code", "fenced"):
            continue
        if kind == "table":
            for k, row in enumerate(lines):
                out.append(Sentence(_prose(row), start + k, _links(row) + caption, table=True))
            continue
        text = "\n".join(lines)
        caption = _links(text)
        at = 0
        for part in _SENTENCE_END.split(text):
            at = text.index(part, at)
            line = start + text.count("\n", 0, at)
            out.append(Sentence(_prose(part), line, _links(part)))
            at += len(part)
    return out


def figures(sentence: str, table: bool = False) -> list[Figure]:
    """The figures of one sentence's text (see the module's docstring); in a table row every
    number with a fractional part is one."""
    found: list[Figure] = []
    for m in _WITH_UNIT.finditer(sentence):
        nums = tuple(_normal(n) for n in re.findall(_NUMBER, m.group("nums")))
        found.append(Figure(m.group(0).strip(), nums, m.group("unit").strip(), m.start()))
    if found or table or _COPY_WORDS.search(sentence):
        taken = [(f.start, f.start + len(f.text)) for f in found]
        for m in _BARE.finditer(sentence):
            if not any(a <= m.start() < b for a, b in taken):
                found.append(Figure(m.group(1), (_normal(m.group(1)),), "", m.start()))
    return sorted(found, key=lambda f: f.start)


def page_sections(page: str) -> dict[str, set[str]]:
    """Each ``## <suite>`` section of the page: the numbers it prints (thousands separators
    dropped), its bold header line (device, versions, date, commit) left out."""
    sections: dict[str, set[str]] = {}
    name = None
    for line in page.split("\n"):
        heading = re.match(r"## (\S+)\s*$", line)
        if heading:
            name = heading.group(1)
            sections[name] = set()
        elif name is not None and not line.startswith("**"):
            text = re.sub(r"\d{4}-\d{2}-\d{2}|\d+(?:\.\d+){2,}", " ", line)
            sections[name] |= {_normal(n) for n in _NUM_TOKEN.findall(text)}
    return sections


def _verbatim(figure: Figure, page: str) -> bool:
    if not figure.unit:
        return False
    pattern = r"(?<![\w.,])" + re.escape(figure.text) + r"(?!\w)"
    return re.search(pattern, re.sub(r"\s+", " ", page)) is not None


def _exempt(file: str, sentence: Sentence, figure: Figure) -> bool:
    for where, phrase in NOT_FIGURES:
        if where == file:
            for m in re.finditer(re.escape(phrase), sentence.text):
                if m.start() <= figure.start < m.end():
                    return True
    return False


def check(markdown: str, page: str, file: str = "<doc>") -> list[Problem]:
    """The figures of ``markdown`` that ``page`` does not hold, by the rule above."""
    sections = page_sections(page)
    problems = []
    for s in sentences(markdown):
        linked = [sections[a] for a in s.links if a in sections]
        for fig in figures(s.text, s.table):
            if _exempt(file, s, fig) or _verbatim(fig, page):
                continue
            if not any(set(fig.numbers) <= numbers for numbers in linked):
                problems.append(Problem(file, s.line, fig.text, s.text))
    return problems


def _doc_problems() -> list[Problem]:
    page = PAGE.read_text()
    problems = []
    for path in DOCS:
        problems += check(path.read_text(), page, str(path.relative_to(ROOT)))
    return problems


# ---------------------------------------------------------------------------------------------
# The checker itself, on a small page and doc

_PAGE = """\
# Benchmark results

## operators

**NVIDIA H200 (gpu) · jax 0.11.2 · 2026-11-26 · commit fe14263**

Effective GB/s over the copy (float32 4140 GB/s).

| operator | cases | float32 |
|---|---:|---:|
| CLIP | 2 | 0.87-0.94 |

## networks

**NVIDIA H100 (gpu) · jax 0.11.2 · 2026-11-27 · commit 08ba4c0**

| network | impl | per s |
|---|---|---:|
| gpt | dml | 1,462,072 |
| gpt | torch eager | 1,265,897 |
"""


@pytest.mark.parametrize(
    "doc",
    [
        "The copy ran at 4140 GB/s.",
        "CLIP runs at 0.87-0.94 of the copy ([results](RESULTS.md#operators)).",
        "The GPT stack: 1,462,072 tokens/s (RESULTS.md#networks).",
        "The GPT stack: 1462072 tokens/s (RESULTS.md#networks).",
        "Ratios: see [the page](RESULTS.md#operators); no number here.",
        "A 3x3 window, jax 0.11.2, 8 x 1024 tokens, `1.9x` in code, issue 23.",
        "    timeout 115 python -m dml_jax.bench --sample-s 0.01 --samples 3",
        "```\nDispatch 'x': 1.5 ms median\n```",
        # a table takes the links of the paragraph before it
        "CLIP (RESULTS.md#operators):\n\n| case | ratio |\n|---|---|\n| CLIP | 0.87 |",
    ],
)
def test_checker_accepts_figures_the_page_holds(doc):
    assert check(doc, _PAGE) == []


@pytest.mark.parametrize(
    "doc, figure",
    [
        ("The copy ran at 4150 GB/s.", "4150 GB/s"),
        ("CLIP runs at 0.87-0.95 of the copy (RESULTS.md#operators).", "0.95"),  # bare
        ("CLIP runs at 0.87-0.94 of the copy.", "0.87"),  # no link: bare ratios need one
        ("The GPT stack runs 1.15x PyTorch eager (RESULTS.md#networks).", "1.15x"),  # derived
        ("The GPT stack: 1,462k tokens/s (RESULTS.md#networks).", "1,462k tokens/s"),
        ("The GPT stack: 1,462,072 tokens/s (RESULTS.md#operators).", "1,462,072 tokens/s"),
        ("The GPT stack: 1,462,072 tokens/s (RESULTS.md#decode).", "1,462,072 tokens/s"),
        ("A call took 6.74 ms against 6.52 (RESULTS.md#networks).", "6.74 ms"),
        ("It ran 8-23% slower.", "8-23%"),
        ("Compile took 20.9 s (RESULTS.md#operators).", "20.9 s"),
        ("From 306k to 342k tokens/s.", "306k to 342k tokens/s"),
        ("On the page 4140 GB/s. This one 0.94 of the copy.", "0.94"),  # a link per sentence
        ("| CLIP | 1.9x |", "1.9x"),
        ("| case | ratio |\n|---|---|\n| CLIP | 0.87 |", "0.87"),  # a table's bare cells
    ],
)
def test_checker_rejects_figures_the_page_does_not_hold(doc, figure):
    assert figure in [p.figure for p in check(doc, _PAGE)]


def test_checker_finds_the_bare_second_figure_and_the_header_numbers_are_not_the_page():
    """``X ms against Y``: Y is a figure too; the header's date and commit hold no figure."""
    figs = figures("ran 6.74 ms a call against 6.52 with the constant")
    assert [f.numbers for f in figs] == [("6.74",), ("6.52",)]
    assert "2026" not in page_sections(_PAGE)["operators"]
    assert "08" not in page_sections(_PAGE)["networks"]
    assert check("It took 2026 s (RESULTS.md#operators).", _PAGE)


# ---------------------------------------------------------------------------------------------
# The docs


def test_every_figure_in_the_docs_is_on_the_results_page():
    problems = _doc_problems()
    assert not problems, "\n".join(str(p) for p in problems)


def _another(number: str, page: str) -> str:
    """``number`` (as printed) with its last digit changed, or a digit added to its fraction, so
    that the page prints it nowhere."""
    held = set().union(*page_sections(page).values())
    tails = [number[:-1] + d for d in "1234567890"]
    if "." in number:
        tails += [number + d for d in "123456789"]
    for other in tails:
        if other != number and _normal(other) not in held:
            return other
    raise AssertionError(f"every neighbour of {number} is on the page")


def test_changing_any_quoted_figure_of_the_docs_fails():
    """The rule has something to hold and holds it: each figure the docs quote (README.md and
    docs/), its first number changed to one the page prints nowhere, fails the check."""
    page = PAGE.read_text()
    changed = 0
    for path in DOCS:
        text, file = path.read_text(), str(path.relative_to(ROOT))
        starts = [0] + [k + 1 for k, c in enumerate(text) if c == "\n"]
        for s in sentences(text):
            for fig in figures(s.text, s.table):
                if _exempt(file, s, fig):
                    continue
                printed = re.match(_NUMBER, fig.text).group(0).removesuffix("k")
                at = re.compile(r"(?<![\w.,])" + re.escape(printed) + r"(?![\d])")
                where = at.search(text, starts[s.line - 1])
                wrong = _another(printed, page)
                mutated = text[: where.start()] + wrong + text[where.end() :]
                found = [p for p in check(mutated, page, file) if wrong in p.figure]
                assert found, (file, s.line, fig.text, wrong)
                changed += 1
    assert changed >= 10, f"only {changed} figures quoted"


def test_not_figures_still_occur():
    for (file, text), why in NOT_FIGURES.items():
        prose = [s.text for s in sentences((ROOT / file).read_text())]
        assert any(text in s for s in prose), (file, text, why)
