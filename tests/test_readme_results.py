"""What the README says a chapter found is what the chapter's stored run found.

The README reports chapters' results in a few words (its chapter table: "a forced overflow
skipped", "plain float16 falls behind"). Such words are written by hand, so each is checked here
against the stored outputs of the chapter it speaks of, the run a reader sees on GitHub or in
`python -m kit book`: a chapter re-stored with a different outcome fails this test until the
README says what the new run says.

Which words report a result: a number or a comparative word (the scanner of
tests/chapters/test_chapter_claims.py), or a word of outcome (`OUTCOME`: stalls, lags, falls behind,
skipped, stopped, checked, verified, ...). Every statement of the README that speaks of a chapter
(a row of the chapter table, split at its semicolons; elsewhere a sentence naming "chapter N") is
scanned (a product's version, "Java 17", is a name), and every such word must lie inside a
phrase of `CLAIMS`, each with the check of the stored run that makes it true. A new result word
without a check fails `test_every_result_word_is_checked`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from chapters.test_chapter_claims import claims

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
NOTEBOOKS = REPO / "notebooks"

OUTCOME = re.compile(
    r"\b(?:stall\w*|lag(?:s|ged)?|fall(?:s)? behind|behind|pace|trains|learns|diverg\w*|overfit\w*|turn(?:s|ed)? up|"
    r"equal|exact(?:ly)?|identical|skipped|stopped|named|verified|restored|checked|correct|fail(?:s|ed)?|"
    r"break(?:s)?|broke|wins?|beats?|unchanged|tested|grow(?:s|ing)?)\b",
    re.IGNORECASE,
)


def outputs(chapter: str) -> str:
    """Every text a chapter's stored run printed or displayed, in order (tracebacks aside)."""
    cells = json.loads((NOTEBOOKS / chapter).read_text())["cells"]
    out = []
    for cell in cells:
        for o in cell.get("outputs", []):
            if o["output_type"] == "stream":
                out.append("".join(o["text"]))
            elif o["output_type"] in ("display_data", "execute_result"):
                data = o.get("data", {})
                text = data.get("text/markdown") or data.get("text/plain") or ""
                out.append("".join(text))
    return "\n".join(out)


# --- what each result word in the README rests on: a check of the chapter's stored outputs -----------------------


def _float16_breaks(text: str) -> bool:
    # section 6: an addition float16 loses, and a running sum that stops growing
    return bool(re.search(r"2048 \+ 1 in float16 = 2048\.0\b", text)) and "float16 total stops growing" in text


def _fine_tuning(text: str) -> bool:
    """Plain float16 fell behind float32's loss drop as the chapter defines it (under half of it and
    under mixed precision's share), the chapter names it a stall or a lag, and mixed precision kept
    float32's pace (at least 0.95 of its drop)."""
    m = re.search(
        r"plain float16's loss dropped (\d+\.\d+) of what float32's dropped, and mixed precision's (\d+\.\d+)", text
    )
    if not m:
        return False
    f16, mixed = float(m.group(1)), float(m.group(2))
    named = "plain float16 stalled (its drop" in text or "plain float16 lagged rather than stalled" in text
    return f16 < min(0.5, mixed) and named and mixed >= 0.95


def _loss_scale(text: str) -> bool:
    m = re.search(
        r"the scale doubled (\d+) time\(s\) and was halved at \d+ skipped step\(s\), at iteration\(s\) "
        r"([\d, ]+) \(the forced one is (\d+)\)",
        text,
    )
    return bool(m) and int(m.group(1)) > 0 and m.group(3) in [s.strip() for s in m.group(2).split(",")]


def _every_answer(text: str) -> bool:
    m = re.search(r"([\d,]+) of the ([\d,]+) answers matched `net.output`", text)
    return bool(m) and m.group(1) == m.group(2) and "wrong answers: 0" in text


def _client_counts(text: str) -> bool:
    counts = set(re.findall(r"^(?:SEQUENTIAL|BATCHED)\s*\|\s*(\d+)\s*\|", text, re.MULTILINE))
    return {"1", "64"} <= counts


def _overfitting(text: str) -> bool:
    m = re.search(
        r"Without early stopping, the training loss fell .*?: it (turned up|stayed flat|kept improving)", text
    )
    return bool(m) and m.group(1) == "turned up"


def _separate_smaller(text: str) -> bool:
    m = re.search(r"SEPARATE's peak is ([\d,]+) bytes .*?SINGLE's ([\d,]+)", text)
    return bool(m) and int(m.group(1).replace(",", "")) < int(m.group(2).replace(",", ""))


# (README phrase, chapter, what the stored run must show): the phrase must stand in the README, and
# the check must pass on the chapter's stored outputs
CLAIMS: list[tuple[str, str, Callable[[str], bool]]] = [
    ("half precision: bytes, speed, where it breaks", "01_arrays_and_backends.ipynb", _float16_breaks),
    (
        "verified save/load",
        "03_training_with_workspaces.ipynb",
        lambda t: "reloaded model gives identical predictions: True" in t,
    ),
    (
        "ParallelWrapper on 1 vs 2 devices",
        "04_multi_device_training.ipynb",
        lambda t: bool(re.search(r"^devices\s*\|\s*1\s*\|\s*2\s*$", t, re.MULTILINE)),
    ),
    (
        'DL4J\'s "+20 % learning rate" advice tested',
        "04_multi_device_training.ipynb",
        lambda t: "2 workers at the advised rate" in t and "whether the advised rate helps" in t,
    ),
    ("every answer checked", "05_parallel_inference.ipynb", _every_answer),
    ("from 1 to 64 clients", "05_parallel_inference.ipynb", _client_counts),
    ("the same 64 clients as asyncio tasks", "05_parallel_inference.ipynb", lambda t: "64 asyncio clients" in t),
    ("the overfitting", "06_early_stopping.ipynb", _overfitting),
    ("the best model restored from disk", "06_early_stopping.ipynb", lambda t: "files: ['best_model.npz']" in t),
    (
        "a diverging and a NaN run stopped by their conditions",
        "06_early_stopping.ipynb",
        lambda t: (
            "MaxScoreIterationTerminationCondition(50.0)" in t
            and "InvalidScoreIterationTerminationCondition()" in t
            and "each at the iteration its condition fired" in t
        ),
    ),
    (
        "Spark parameter averaging checked equal to `Network.fit`",
        "07_training_on_spark.ipynb",
        lambda t: "Spark (1 worker, frequency 1) == Network.fit: True" in t,
    ),
    (
        "a bad-label partition named in the error",
        "07_training_on_spark.ipynb",
        lambda t: bool(re.search(r"SparkTrainingError: .*? in partition \d+ \(element \d+", t)),
    ),
    ("the loss scale growing and a forced overflow skipped", "08_half_the_bytes.ipynb", _loss_scale),
    (
        "a fine-tuning run where plain float16 falls behind float32's loss drop (the chapter says whether it stalled "
        "or lagged) and mixed precision keeps float32's pace",
        "08_half_the_bytes.ipynb",
        _fine_tuning,
    ),
    (
        "chapter 3 and the tests measure the smaller peak",
        "03_training_with_workspaces.ipynb",
        _separate_smaller,
    ),
]

# A product and its version is a name, not a result: "Python 3.11", "Java 17", "DL4J 1.0".
_VERSIONED_NAME = re.compile(
    r"\b(?:Python|Java|JRE|openjdk|DL4J|ND4J|CUDA|CuPy|NumPy|Spark|PySpark)[ -]?\d+(?:\.\d+)*\b"
)


def statements(readme: str) -> list[tuple[str, str]]:
    """(chapter or "", statement): each clause of a chapter-table row (split at semicolons), and
    each sentence elsewhere that names a chapter ("chapter 7", "chapters 2-4")."""
    start = readme.index("\n## Chapters\n")
    end = readme.index("\n## ", start + 1)
    table, rest = readme[start:end], readme[:start] + readme[end:]
    out = []
    for line in table.splitlines():
        m = re.match(r"\| `(\d\d_\w+\.ipynb)` \| (.*) \|$", line)
        if m:
            out += [(m.group(1), clause.strip()) for clause in m.group(2).split(";")]
    for sentence in re.split(r"(?<=[.!?])\s+", rest):
        if re.search(r"\bchapters? \d", sentence, re.IGNORECASE):
            out.append(("", sentence))
    return out


def result_words(statement: str) -> list[str]:
    statement = _VERSIONED_NAME.sub(" ", statement)
    return claims(statement) + [m.group(0) for m in OUTCOME.finditer(statement)]


def uncovered(readme: str) -> list[str]:
    """The statements of `readme` with a result word outside every phrase of CLAIMS."""
    phrases = [p for p, _, _ in CLAIMS]
    bad = []
    for chapter, statement in statements(readme):
        rest = statement
        for phrase in phrases:
            rest = rest.replace(phrase, " ")
        found = result_words(rest)
        if found:
            bad.append(f"{chapter or 'README'}: {statement[:120]!r}: {found}")
    return bad


def test_every_result_word_is_checked():
    bad = uncovered(README)
    assert not bad, (
        "the README reports a chapter's result that no check holds to the chapter's stored run; add the phrase "
        "to CLAIMS with its check (or say it as what the chapter measures):\n" + "\n".join(bad)
    )


@pytest.mark.parametrize(("phrase", "chapter", "check"), CLAIMS, ids=[c[0][:40] for c in CLAIMS])
def test_the_readme_says_what_the_stored_run_found(phrase, chapter, check):
    assert phrase in README, f"CLAIMS names a phrase the README no longer holds: {phrase!r}"
    assert check(outputs(chapter)), f"the README says {phrase!r}; {chapter}'s stored run does not show it"


@pytest.mark.parametrize(("phrase", "chapter", "check"), CLAIMS, ids=[c[0][:40] for c in CLAIMS])
def test_every_check_can_fail(phrase, chapter, check):
    """A check that passed on any text would prove nothing: each fails on a run that printed nothing."""
    assert not check("")


def test_the_old_stall_wording_is_caught():
    """The regression: the table said plain float16 "stalls" in chapter 8, where the stored run says it
    lagged rather than stalled. That wording is a result word no check holds, and the check that does
    hold the table's words refuses a run that did not fall behind."""
    (phrase,) = [p for p, _, check in CLAIMS if check is _fine_tuning]
    old = README.replace(phrase, "a fine-tuning run where plain float16 stalls and mixed precision trains")
    assert any("stalls" in line for line in uncovered(old))
    stored = outputs("08_half_the_bytes.ipynb")
    assert _fine_tuning(stored)
    kept_up = re.sub(r"plain float16's loss dropped [\d.]+ of", "plain float16's loss dropped 0.98 of", stored)
    assert not _fine_tuning(kept_up)
