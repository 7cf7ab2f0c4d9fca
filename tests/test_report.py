import math

import numpy as np
import pytest

from collapse import report, sources
from collapse.checks import ParameterError


def test_a_check_states_its_bound_once_and_writes_both_texts_from_it(capsys):
    r = report.check(
        "sigma1-near-one",
        r"$\sigma_1 \approx 1$",
        report.at_most(
            r"$\lvert\sigma_1 - 1\rvert$", {"$T = 100$": 0.004, "$T = 400$": 0.002}, 0.01
        ),
        kind="claim",
        source="mtg-v1-markov",
        note="3 seeds",
    )
    assert r["passed"] is True and r["decided"] is True
    assert r["measured"] == (
        r"3 seeds; $\lvert\sigma_1 - 1\rvert$: $T = 100$: $0.004$; $T = 400$: $0.002$"
    )
    assert r["expected"] == r"$\lvert\sigma_1 - 1\rvert \le 0.01$ in every case"
    assert r["source"] == "naitsaada2024gapv1, abstract"
    assert r["quote"] == sources.QUOTES["mtg-v1-markov"].text
    assert r["rows"] == [["$T = 100$", "reproduced"], ["$T = 400$", "reproduced"]]
    assert ": reproduced." in capsys.readouterr().out
    failing = report.check(
        "a", "c", report.at_most("x", {"one": 0.004, "two": 0.02}, 0.01), kind="extension"
    )
    assert report.outcome(failing) == "not-reproduced"
    assert failing["rows"] == [["one", "reproduced"], ["two", "not-reproduced"]]


@pytest.mark.parametrize(
    "comparison, passed",
    [
        (report.at_most("x", 1.0, 1.0), True),
        (report.below("x", 1.0, 1.0), False),
        (report.at_least("x", 1.0, 1.0), True),
        (report.above("x", 1.0, 1.0), False),
        (report.within("x", 0.5, 0.0, 1.0), True),
        (report.within("x", 1.5, 0.0, 1.0), False),
        (report.near("x", 2.3, 2.0, 0.15, relative=True), True),
        (report.near("x", 2.31, 2.0, 0.3), False),
        (report.equal("r", 1, 1), True),
        (report.increasing("x", {"a": 1, "b": 2, "c": 3}), True),
        (report.increasing("x", {"a": 1, "b": 3, "c": 2}), False),
    ],
)
def test_each_comparison_decides_from_the_numbers(comparison, passed):
    assert comparison.passed is passed and comparison.decided


def test_expected_texts_name_the_bound():
    assert report.within("KS", 0.03, 0, 0.05).expected() == "KS in $[0, 0.05]$"
    assert report.near("$m$", 2.1, 2, 0.15, relative=True).expected() == "$m$ within 15 % of $2$"
    assert report.at_least("$f$", 3.0, 2).expected() == r"$f \ge 2$"
    assert report.equal("radius", 1, 1).measured() == "radius: $1$"


def test_a_confidence_interval_decides_only_off_the_bound():
    inside = report.at_most("ratio", 0.9, 0.95, interval=(0.85, 0.99))
    assert inside.passed and not inside.decided
    below = report.at_most("ratio", 0.9, 0.95, interval=(0.85, 0.94))
    above = report.at_most("ratio", 1.1, 0.95, interval=(1.0, 1.2))
    assert (below.passed, below.decided) == (True, True)
    assert (above.passed, above.decided) == (False, True)
    r = report.check("ci", "c", inside, kind="extension")
    assert report.outcome(r) == "inconclusive" and "95 % CI $[0.85, 0.99]$" in r["measured"]
    with pytest.raises(ParameterError, match="must contain its value"):
        report.at_most("ratio", 0.9, 0.95, interval=(0.92, 0.99))


def test_a_decisive_failure_decides_even_beside_an_open_interval():
    r = report.check(
        "mixed",
        "c",
        report.at_most("ratio", 0.9, 0.95, interval=(0.85, 0.99)),
        report.at_least("fall", 1.0, 2.0),
        kind="extension",
    )
    assert report.outcome(r) == "not-reproduced"


def test_an_unmet_requirement_leaves_the_verdict_open_and_says_why():
    r = report.check(
        "rate",
        "c",
        report.at_most("excess", -0.2, 1e-3),
        report.requires("every tail decays", np.bool_(False), "the window still rises"),
        kind="claim",
        source="wu-masked-collapse",
    )
    assert report.outcome(r) == "inconclusive"
    assert "every tail decays: no (the window still rises)" in r["measured"]
    held = report.check("rate", "c", report.requires("every tail decays", True), kind="sanity")
    assert report.outcome(held) == "reproduced"


def test_a_value_within_its_own_spread_of_the_bound_is_marked():
    near = report.at_least("fall", {"a": 2.3, "b": 9.0}, 2.0, spread={"a": 0.5, "b": 0.5})
    far = report.at_least("fall", {"a": 4.0, "b": 9.0}, 2.0, spread=0.5)
    assert near.near_threshold and not far.near_threshold
    r = report.check("f", "c", near, kind="extension")
    assert r["near_threshold"] is True


def test_nan_and_missing_values_cannot_pass():
    nan = report.at_most("x", math.nan, 1.0)
    assert not nan.passed and not nan.decided
    empty = report.at_most("x", {}, 1.0)
    assert not empty.passed and "no value in this run" in empty.measured()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(key="W1 collapse"), "key must be lowercase"),
        (dict(kind="theorem"), "kind must be one of claim, analogue, extension, sanity"),
        (dict(source=None), "must quote the sentence it tests"),
        (dict(kind="analogue", source=None), "must quote the sentence it tests"),
        (dict(source="not-a-quote"), "source must be one of"),
        (dict(kind="sanity"), "takes no source"),
    ],
)
def test_check_refuses_bad_keys_kinds_and_claims_without_a_quote(kwargs, match):
    args = dict(key="ok", kind="claim", source="wu-masked-collapse") | kwargs
    with pytest.raises(ParameterError, match=match):
        report.check(
            args["key"], "c", report.at_most("x", 0, 1), kind=args["kind"], source=args["source"]
        )


def test_outcomes_are_computed_never_typed_in():
    with pytest.raises(ParameterError, match="holds must be a bool computed"):
        report.requires("x", "yes")
    with pytest.raises(ParameterError, match="value must be a number"):
        report.at_most("x", True, 1)
    with pytest.raises(ParameterError, match="one or more comparisons"):
        report.check("ok", "c", True, kind="extension")
    with pytest.raises(TypeError, match="kind"):
        report.check("ok", "c", report.at_most("x", 0, 1))


def test_every_quote_is_short_cited_and_unique():
    import re
    from pathlib import Path

    bib = (Path(__file__).resolve().parents[1] / "book" / "references.bib").read_text()
    keys = set(re.findall(r"^@\w+\{([^,]+),", bib, flags=re.MULTILINE))
    texts = [q.text for q in sources.QUOTES.values()]
    assert len(set(texts)) == len(texts)
    for name, q in sources.QUOTES.items():
        assert re.fullmatch(r"(wu|mtg)-[a-z0-9-]+", name), name
        assert q.cite in keys, (name, q.cite)
        assert 20 <= len(q.text) <= 320 and q.where, name
        if len(q.text) > sources.GIST_WIDTH:  # a table cell shows its gist
            assert q.gist and len(q.gist) <= sources.GIST_WIDTH, name


def test_every_quote_is_the_sentence_of_some_verdict():
    import re
    from pathlib import Path

    chapters = Path(__file__).resolve().parents[1].glob("notebooks/[0-9][0-9]-*.md")
    used = {
        name
        for path in chapters
        for name in re.findall(r'"((?:wu|mtg)-[a-z0-9-]+)"', path.read_text())
    }
    assert used <= set(sources.QUOTES), used - set(sources.QUOTES)
    assert set(sources.QUOTES) <= used, set(sources.QUOTES) - used
