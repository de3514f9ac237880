"""Math scorer: real math-verify in worker processes, our own deadline, clear errors."""

import threading
import time

import pytest

from xrpo_verl.rewards.math import MathRewardConfig, compute_score
from xrpo_verl.rewards.result import ScoreResult

FAST = MathRewardConfig(timeout_s=20.0, num_workers=2)


def score(response, gold, config=FAST):
    return compute_score("math/test", response, gold, None, config)


@pytest.mark.parametrize(
    "pred, gold",
    [
        (r"\dfrac{1}{2}", "0.5"),  # \dfrac, decimal
        (r"\frac{\sqrt{2}}{2}", r"\sqrt{2}/2"),  # radicals
        (r"\sqrt{12}", r"2\sqrt{3}"),
        (r"(1,3]", r"(1, 3]"),  # intervals
        (r"\{3,2,1\}", r"\{1,2,3\}"),  # sets ignore order
        (r"(1, 2)", r"(1,2)"),  # tuples
        (r"1,000", "1000"),  # thousands separator
        (r"1{,}000{,}000", "1000000"),
        (r"10 \text{ cm}", "10"),  # units
        (r"10\,\mathrm{cm}", "10"),
        (r"90^\circ", "90"),  # degrees
        (r"\text{(B)}", "B"),  # \text{}
        (r"(x+1)^2", "x^2+2x+1"),  # symbolic equality
        ("18.0", 18),  # int ground truth
    ],
)
def test_equivalent_answers_score_one(pred, gold):
    result = score(rf"Reasoning... \boxed{{{pred}}}", gold)
    assert result == ScoreResult(score=1.0, acc=1.0, pred=pred, verdict="correct").to_dict()


@pytest.mark.parametrize(
    "pred, gold",
    [
        ("73", "72"),
        (r"[1,3)", r"(1,3]"),  # endpoints matter
        (r"(3,2)", r"(2,3)"),  # tuples keep order
        (r"\frac{1}{3}", "0.33"),
    ],
)
def test_different_answers_score_zero(pred, gold):
    result = score(rf"\boxed{{{pred}}}", gold)
    assert result["score"] == 0.0 and result["verdict"] == "wrong" and result["pred"] == pred


def test_missing_answer_scores_zero_with_a_reason():
    result = score("I think it is 5", "5")
    assert result["score"] == 0.0 and result["verdict"] == "no_answer"
    assert "no \\boxed{}" in result["reason"]
    # A box inside an unfinished <think> does not count.
    assert score(r"<think>\boxed{5}", "5")["verdict"] == "no_answer"
    assert score(r"<think>\boxed{4}</think>\boxed{5}", "5")["verdict"] == "correct"


def test_answer_that_does_not_parse_is_unparsable_not_an_error():
    for pred in (r"\frac{}{}", "???"):
        result = score(rf"\boxed{{{pred}}}", "1")
        assert result["verdict"] == "unparsable" and result["score"] == 0.0 and result["pred"] == pred
        assert "cannot parse answer" in result["reason"]


@pytest.mark.parametrize("gold", ["", "   ", r"\frac{", None, True, [1, 2], {"a": 1}])
def test_malformed_ground_truth_raises_instead_of_scoring_zero(gold):
    with pytest.raises(ValueError, match="ground truth"):
        score(r"\boxed{1}", gold)
    with pytest.raises(ValueError, match="ground truth"):
        score("no answer at all", gold)  # also when the response has no answer


def test_other_answer_formats_are_configurable():
    config = MathRewardConfig(answer_formats=("answer_line",), timeout_s=20.0, num_workers=2)
    assert score("so...\nAnswer: $\\frac{3}{4}$", "0.75", config)["score"] == 1.0
    assert score(r"\boxed{0.75}", "0.75", config)["verdict"] == "no_answer"
    gsm = MathRewardConfig(answer_formats=("hash",), timeout_s=20.0, num_workers=2)
    assert score("48/2 = 24\n#### 1,024", "1024", gsm)["score"] == 1.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"answer_formats": ("latex",)}, "unknown answer_formats"),
        ({"answer_formats": ()}, "empty"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"num_workers": 0}, "num_workers"),
    ],
)
def test_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MathRewardConfig(**kwargs)


def test_scores_inside_worker_threads():
    """math-verify's own signal.alarm timeout would raise outside the main thread; ours does not."""
    cases = [(rf"\boxed{{{i}/2}}", str(i / 2)) for i in range(8)] + [(r"\boxed{1}", "2")]
    results = [None] * len(cases)

    def run(i):
        results[i] = score(*cases[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r["score"] for r in results] == [1.0] * 8 + [0.0]


def test_runaway_sympy_hits_our_deadline_and_the_pool_recovers():
    """9^(9^(9^9)) makes sympy compute a gigantic power; the worker is killed at the deadline."""
    config = MathRewardConfig(timeout_s=1.5, num_workers=1)
    score(r"\boxed{1}", "1", config)  # start the worker first, so start-up is not timed
    start = time.monotonic()
    result = score(r"\boxed{9^{9^{9^{9}}}}", "1", config)
    elapsed = time.monotonic() - start
    assert result["verdict"] == "timeout" and result["score"] == 0.0
    assert "1.5 s" in result["reason"]
    assert elapsed < 60  # returned at all: a thread-based limit would hang here forever
    # The one worker was replaced and the next answer is verified normally.
    assert score(r"\boxed{2}", "2", config)["verdict"] == "correct"


def test_a_worker_that_cannot_start_raises_instead_of_scoring():
    """Start-up failures are the machine's fault: they raise, they are never a 'timeout' verdict."""
    from xrpo_verl.rewards._verify_pool import VerifyPool

    pool = VerifyPool(1, startup_timeout_s=0.001)  # no Python starts and imports math-verify in 1 ms
    with pytest.raises(RuntimeError, match="did not start within"):
        pool.call({"gold": "1", "pred": "1"}, timeout_s=5.0)
    with pytest.raises(ValueError, match="num_workers"):
        VerifyPool(0)


# ---- the scorer is total: any response string gets a verdict, never an exception -------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from xrpo_verl.rewards.math import VERDICTS  # noqa: E402
from xrpo_verl.rewards.routing import compute_score as routed_score  # noqa: E402

LATEXISH = st.lists(
    st.sampled_from([*"\\{}^_()[],.-+*/=0123456789xy $<>", "\\boxed{", "\\frac", "</think>", "<think>"]), max_size=30
).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(response=st.one_of(st.text(max_size=120), LATEXISH))
def test_any_response_gets_a_verdict(response):
    for result in (score(response, "12"), routed_score("math/prop", response, "12")):
        assert result["verdict"] in VERDICTS and result["score"] in (0.0, 1.0)
        assert result["score"] == float(result["verdict"] == "correct")


def _fake_worker(tmp_path, monkeypatch, body: str) -> MathRewardConfig:
    """A stand-in worker module (the real one cannot be made to fail on demand) that says ready, then `body`."""
    from xrpo_verl.rewards import _verify_pool

    (tmp_path / "fake_verify_worker.py").write_text(
        f'import sys\nprint(\'{{"status": "ready"}}\', flush=True)\nfor line in sys.stdin:\n    {body}\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_verify_pool, "_WORKER_MODULE", "fake_verify_worker")
    monkeypatch.setattr(_verify_pool, "_POOLS", {})
    return MathRewardConfig(timeout_s=20.0, num_workers=1)


def test_a_verifier_that_raises_is_a_verdict(tmp_path, monkeypatch):
    config = _fake_worker(tmp_path, monkeypatch, 'print(\'{"status": "error", "reason": "boom"}\', flush=True)')
    result = score(r"\boxed{1}", "1", config)
    assert result["verdict"] == "verify_error" and result["score"] == 0.0 and "boom" in result["reason"]


def test_a_worker_that_dies_on_an_answer_is_a_verdict(tmp_path, monkeypatch):
    config = _fake_worker(tmp_path, monkeypatch, "sys.exit(3)")
    result = score(r"\boxed{1}", "1", config)
    assert result["verdict"] == "verify_error" and "code 3" in result["reason"]
