"""Quality metrics against hand-computed values on crafted cases."""
import math

import pytest

from harness.metrics.math_answer import answer_correct, final_number
from harness.metrics.rouge import rouge, sentence_lines
from harness.metrics.squad import exact_match, f1, normalize_answer
from harness.metrics.sql import execution_match, results_match


def test_squad_normalisation_is_the_official_one():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple, a day") == "apple day"
    assert normalize_answer("theory") == "theory"  # articles only as whole words


def test_squad_exact_match_and_f1_by_hand():
    assert exact_match("The Denver Broncos!", ["Denver Broncos"]) == 1.0
    assert exact_match("Broncos", ["Denver Broncos"]) == 0.0
    # pred tokens {denver, broncos, in, 2016}, gold {broncos}: P = 1/4, R = 1, F1 = 2·(1/4)/(5/4) = 0.4
    assert f1("Denver Broncos in 2016", ["the Broncos"]) == pytest.approx(0.4)
    # the best gold counts: second gold gives P = R = 1
    assert f1("Denver Broncos in 2016", ["the Broncos", "Denver Broncos in 2016."]) == pytest.approx(1.0)
    # tokens count with multiplicity: {b:2, c:1} ∩ {b:1, c:2} = 2 tokens, so P = R = 2/3
    assert f1("b b c", ["b c c"]) == pytest.approx(2 / 3)
    assert f1("", ["Denver"]) == 0.0


def test_rouge_by_hand():
    # 6 unigrams each, 5 shared (the×2, cat, on, mat); bigrams 5 each, 3 shared; LCS = 5
    s = rouge("the cat sat on the mat", "the cat lay on the mat")
    assert s["rouge1"] == pytest.approx(5 / 6)
    assert s["rouge2"] == pytest.approx(3 / 5)
    assert s["rougeL"] == pytest.approx(5 / 6)
    assert s["rougeLsum"] == pytest.approx(5 / 6)


def test_rouge_lsum_works_per_sentence():
    # swapped sentences: whole-text LCS = 3 of 6 tokens, but per-sentence union LCS covers all 6
    s = rouge("The dog ran. The cat sat.", "The cat sat. The dog ran.")
    assert s["rougeL"] == pytest.approx(0.5)
    assert s["rougeLsum"] == pytest.approx(1.0)
    assert sentence_lines("A b. C d! E?") == "A b.\nC d!\nE?"
    assert sentence_lines("line one\nline two") == "line one\nline two"


def test_gsm8k_final_answer():
    gold = "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs.\nShe makes 9 * 2 = $<<9*2=18>>18.\n#### 18"
    assert final_number(gold) == 18
    assert answer_correct("She has 9 eggs, so 9 * 2 = 18 dollars.", gold) == 1.0
    assert answer_correct("The answer is $18.", gold) == 1.0
    assert answer_correct("#### 18.00", gold) == 1.0
    assert answer_correct("The answer is 17. Checking: 18", gold) == 0.0  # a stated answer wins over the last number
    assert answer_correct("I do not know.", gold) == 0.0
    assert final_number("Total: 1,234.5 and 10 - 5") == 5  # "- 5" with a space is subtraction, not -5
    assert final_number("#### -3") == -3
    assert final_number("#### 1,234.50") == pytest.approx(1234.5)


def test_result_comparison():
    rows = [(1, "a"), (2, "b"), (2, "b")]
    assert results_match(rows, list(reversed(rows)), ordered=False)
    assert not results_match(rows, list(reversed(rows)), ordered=True)
    assert results_match(rows, [(b, a) for a, b in rows], ordered=True)  # columns may be permuted
    assert not results_match(rows, [(1, "a"), (1, "a"), (2, "b")], ordered=False)  # multisets, not sets
    assert not results_match(rows, rows[:2], ordered=False)
    assert not results_match([(1, 2)], [(1, 2, 3)], ordered=False)
    assert results_match([], [], ordered=False)
    assert not results_match([], [(1,)], ordered=False)
    assert results_match([(1,)], [(1.0,)], ordered=False)  # SQLite integer vs real of equal value


def test_execution_match_on_a_shipped_database():
    from harness.tasks.base import TASKS_DIR

    db = TASKS_DIR / "spider/database/concert_singer/concert_singer.sqlite"
    gold = "SELECT name FROM singer ORDER BY age DESC"
    assert execution_match(db, gold, "SELECT Name FROM singer ORDER BY Age DESC") == 1.0
    assert execution_match(db, gold, "SELECT name FROM singer ORDER BY age ASC") == 0.0  # gold orders
    unordered = "SELECT name FROM singer"
    assert execution_match(db, unordered, "SELECT name FROM singer ORDER BY age") == 1.0
    assert execution_match(db, unordered, "SELECT nme FROM singer") == 0.0  # an error scores 0
    assert execution_match(db, unordered, "DROP TABLE singer") == 0.0
    assert not math.isnan(execution_match(db, "SELECT count(*) FROM singer", "SELECT count(*) FROM singer"))
