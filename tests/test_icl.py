"""ICL corpus: admission, keep policy, top-K retrieval with self-exclusion, rendering (whole solutions only) and the similarity ceiling.

The embedder here is a fake (bag of words over a fixed vocabulary) so the cosines can be computed
by hand; retrieval with the real MiniLM is in test_embeddings.py."""

import numpy as np
import pytest

from xrpo_verl.icl import ICLCorpus, ICLExample, render_icl_prompt

VOCAB = ["apple", "pear", "plum", "train", "car", "boat"]


class BagOfWords:
    """Fake embedder: normalised word counts over VOCAB (unknown words ignored)."""

    def __init__(self):
        self.calls = 0

    def encode(self, texts):
        self.calls += 1
        out = np.zeros((len(texts), len(VOCAB)), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.split():
                if w in VOCAB:
                    out[i, VOCAB.index(w)] += 1
            out[i] /= max(np.linalg.norm(out[i]), 1e-12)
        return out


def count(t):
    return len(t.split())


def _corpus(**kw):
    c = ICLCorpus(BagOfWords(), **kw)
    c.add("q1", "apple pear", "sol1", step=1, num_tokens=1)
    c.add("q2", "apple plum", "sol2", step=1, num_tokens=1)
    c.add("q3", "train car", "sol3", step=1, num_tokens=1)
    return c


def test_top_k_by_cosine_excluding_the_query_itself():
    c = _corpus()
    got = c.retrieve("q1", "apple pear", k=2)
    # cos(q1, q1) = 1 is excluded; cos(q1, q2) = 0.5; cos(q1, q3) = 0
    assert [e.prompt_id for e in got] == ["q2", "q3"]
    assert got[0].similarity == pytest.approx(0.5)
    assert [e.prompt_id for e in c.retrieve("q1", "apple pear", k=2, min_similarity=0.1)] == ["q2"]
    assert c.retrieve("q1", "boat", k=2, min_similarity=0.1) == []


def test_empty_corpus_and_only_self_give_zero_shot():
    c = ICLCorpus(BagOfWords())
    assert c.retrieve("q1", "apple", k=2) == []
    c.add("q1", "apple", "s", step=0, num_tokens=1)
    assert c.retrieve("q1", "apple", k=2, min_similarity=0.0) == []
    assert render_icl_prompt([], "solve x", count_tokens=count).text == "solve x"


def test_admission_and_keep_policies():
    c = ICLCorpus(BagOfWords(), per_prompt=2, keep="shortest")
    assert not c.add("q", "apple", "wrong", step=0, num_tokens=1, verified=False)
    assert len(c) == 0
    c.add("q", "apple", "long", step=1, num_tokens=9)
    c.add("q", "apple", "short", step=2, num_tokens=2)
    assert not c.add("q", "apple", "longest", step=3, num_tokens=20)
    assert [e.response_text for e in c.examples("q")] == ["short", "long"]
    r = ICLCorpus(BagOfWords(), per_prompt=1, keep="recent")
    r.add("q", "apple", "old", step=1, num_tokens=1)
    r.add("q", "apple", "new", step=5, num_tokens=9)
    assert [e.response_text for e in r.examples("q")] == ["new"]
    assert r.embedder.calls == 1  # the prompt text is embedded once
    with pytest.raises(ValueError, match="only training prompts"):
        r.add("e1", "apple", "x", step=1, num_tokens=1, split="test")


def test_state_dict_round_trip():
    c = _corpus()
    d = ICLCorpus(BagOfWords())
    d.load_state_dict(c.state_dict())
    assert len(d) == 3 and d.retrieve("q1", "apple pear", k=1)[0].prompt_id == "q2"


def _ex(pid, problem, sol):
    return ICLExample(pid, problem, sol, 0, count(sol))


def test_render_skips_long_solutions_whole_and_keeps_the_prompt_last():
    """Pins issue 11 point 5: a solution is never cut (its end holds the answer); one longer than
    max_example_tokens is skipped. The old code cut it to its first tokens, losing the answer."""
    exs = [_ex("a", "P1", "w " * 10 + "ANSWER"), _ex("b", "P2", "v v ANSWER")]
    r = render_icl_prompt(exs, "solve it", count_tokens=count, max_example_tokens=3)
    assert [e.prompt_id for e in r.examples] == ["b"] and r.skipped_long == 1
    assert "P1" not in r.text and "Problem: P2\nSolution: v v ANSWER\n" in r.text
    assert r.text.endswith("Now solve the following problem.\nsolve it")
    assert all(e.response_text in r.text for e in r.examples)  # every shown solution is whole


def test_render_drops_examples_rather_than_cutting_then_falls_back():
    exs = [_ex("a", "P1", "w " * 6), _ex("b", "P2", "v " * 6)]
    full = render_icl_prompt(exs, "go", count_tokens=count).text
    one = render_icl_prompt(exs[:1], "go", count_tokens=count).text
    # a cap that fits one full example but not two: the second is dropped, the first stays whole
    r = render_icl_prompt(exs, "go", count_tokens=count, max_prompt_tokens=count(one))
    assert r.text == one and count(full) > count(one) and len(r.examples) == 1
    # tighter: the single example does not fit whole, so it is not shown at all (zero-shot)
    r = render_icl_prompt(exs, "go", count_tokens=count, max_prompt_tokens=count(one) - 2)
    assert r.text == "go" and r.examples == ()


def test_similarity_ceiling_skips_near_duplicates_of_the_query():
    """Pins issue 11 point 5: the same problem stored under another id (similarity 1.0) would hand the
    model the query's answer; the ceiling skips it and retrieval moves on to the next prompt."""
    c = _corpus()
    c.add("q1_copy", "apple pear", "the answer of q1", step=1, num_tokens=3)
    assert c.retrieve("q1", "apple pear", k=1)[0].prompt_id == "q1_copy"  # no ceiling: the duplicate leaks
    got = c.retrieve("q1", "apple pear", k=2, max_similarity=0.98)
    assert [e.prompt_id for e in got] == ["q2", "q3"]
    with pytest.raises(ValueError, match="below min_similarity"):
        c.retrieve("q1", "apple", k=1, min_similarity=0.5, max_similarity=0.2)


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda: ICLCorpus(BagOfWords(), keep="longest"), "keep"),
        (lambda: ICLCorpus(BagOfWords(), per_prompt=0), "per_prompt"),
        (lambda: _corpus().retrieve("q1", "apple", k=0), "k"),
        (lambda: _corpus().retrieve_many(["a", "b"], ["x"]), "prompt_texts"),
        (
            lambda: ICLCorpus(type("E", (), {"encode": lambda s, t: np.ones((1, 3))})()).add(
                "q", "x", "y", step=0, num_tokens=1
            ),
            "L2-normalised",
        ),
        (lambda: render_icl_prompt([], "x", count_tokens=count, max_example_tokens=0), "max_example"),
    ],
)
def test_bad_input_raises(call, needle):
    with pytest.raises(ValueError, match=needle):
        call()


class Fixed:
    """Fake embedder returning preset unit vectors by text (the prompt text is an index)."""

    def __init__(self, z):
        self.z = z

    def encode(self, texts):
        return self.z[[int(t) for t in texts]]


def _unit(n, d, seed):
    z = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return z / np.linalg.norm(z, axis=1, keepdims=True)


@pytest.mark.parametrize("index", ["flat", "hnsw"])
def test_faiss_retrieval_matches_brute_force_as_the_corpus_grows(index):
    """The index is synced lazily (rows added between retrievals land in it), excludes the
    query's own row, and agrees with the exact top-k of the cosine matrix (real FAISS)."""
    z = _unit(300, 32, 0)
    c = ICLCorpus(Fixed(z), index=index, use_gpu="never")
    for n in (10, 120, 300):
        for i in range(len(c), n):
            c.add(f"p{i}", str(i), f"s{i}", step=0, num_tokens=1)
        queries = list(range(0, n, 7))
        got = c.retrieve_many([f"p{i}" for i in queries], [str(i) for i in queries], k=3)
        sims = z[queries] @ z[:n].T
        sims[np.arange(len(queries)), queries] = -np.inf
        want = np.argsort(-sims, axis=1)[:, :3]
        assert [[e.prompt_id for e in g] for g in got] == [[f"p{j}" for j in row] for row in want]
        assert np.allclose([e.similarity for e in got[0]], np.sort(sims[0])[::-1][:3], atol=1e-5)


def test_ivf_index_is_retrained_when_the_corpus_doubles():
    z = _unit(2000, 16, 1)
    c = ICLCorpus(Fixed(z), index="ivf", use_gpu="never")
    sizes = []
    for n in (50, 90, 100, 400, 2000):
        for i in range(len(c), n):
            c.add(f"p{i}", str(i), f"s{i}", step=0, num_tokens=1)
        c.retrieve("new", str(n - 1), k=1)  # a near-duplicate query: its own vector is a corpus row
        sizes.append(c._trained_on)
    assert sizes == [50, 50, 100, 400, 2000]
    # once trained on 2000 rows (nlist = 51 lists), the exact match is still found first
    hit = c.retrieve("new", "1234", k=1)[0]
    assert hit.prompt_id == "p1234" and hit.similarity == pytest.approx(1.0, abs=1e-5)


def test_restored_corpus_rebuilds_its_index():
    z = _unit(50, 8, 2)
    c = ICLCorpus(Fixed(z), use_gpu="never")
    for i in range(50):
        c.add(f"p{i}", str(i), f"s{i}", step=0, num_tokens=1)
    before = [e.prompt_id for e in c.retrieve("p3", "3", k=4)]
    d = ICLCorpus(Fixed(z), use_gpu="never")
    d.load_state_dict(c.state_dict())
    assert [e.prompt_id for e in d.retrieve("p3", "3", k=4)] == before


def test_icl_user_turn_fits_the_rollout_prompt_cap_with_the_chat_template():
    """Regression: with the CPU tiny model the rendered ICL prompt (~150 tokens for K=2) never fit
    a 64-token prompt cap, so every all-fail prompt fell back to zero-shot and ICL never triggered.
    The budget is the rollout's cap minus what the chat template adds around the user turn."""
    from xrpo_verl.icl import ICLExample, render_icl_prompt, user_turn_budget
    from xrpo_verl.lab.tiny_model import TinyModelConfig, build_tokenizer

    tok = build_tokenizer(TinyModelConfig())
    messages = [{"role": "user", "content": "57+88=?"}]

    def count(t):
        return len(tok.encode(t, add_special_tokens=False))

    overhead = count(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)) - count("57+88=?")
    assert overhead > 0 and user_turn_budget(overhead, 192) == 192 - overhead
    ex = [ICLExample("a", "3+4=?", "3+4\n=7\n\\boxed{7}", 1, 9), ICLExample("b", "5-2=?", "5-2\n=3\n\\boxed{3}", 1, 9)]
    text = render_icl_prompt(
        ex, "57+88=?", count_tokens=count, max_example_tokens=16, max_prompt_tokens=user_turn_budget(overhead, 192)
    ).text
    assert text != "57+88=?"
    user = [{"role": "user", "content": text}]
    assert count(tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)) <= 192
    # a cap of 64 tokens cannot hold one example: zero-shot
    small = user_turn_budget(overhead, 64)
    assert render_icl_prompt(
        ex, "57+88=?", count_tokens=count, max_example_tokens=16, max_prompt_tokens=small
    ).text == ("57+88=?")


def test_icl_decision_says_why_a_prompt_stays_zero_shot():
    from xrpo_verl.config import ICLConfig
    from xrpo_verl.icl import icl_decision

    c = _corpus()
    cfg = ICLConfig(k=2, min_similarity=0.1, max_example_tokens=4)
    ok = icl_decision(c, cfg, prompt_id="q1", prompt_text="apple pear", count_tokens=count, max_prompt_tokens=100)
    assert (ok.reason, ok.examples, ok.similarity) == ("ok", 1, pytest.approx(0.5))  # q2 only: q3 is below 0.1
    assert "sol2" in ok.text and ok.text.endswith("apple pear")
    none = icl_decision(c, cfg, prompt_id="q1", prompt_text="boat", count_tokens=count, max_prompt_tokens=100)
    assert (none.reason, none.text, none.examples) == ("no_examples", "", 0)
    tight = icl_decision(c, cfg, prompt_id="q1", prompt_text="apple pear", count_tokens=count, max_prompt_tokens=3)
    assert (tight.reason, tight.text) == ("no_fit", "")


def test_add_many_encodes_new_prompts_in_one_call_and_keeps_what_add_would():
    one_by_one = _corpus(per_prompt=2, keep="shortest")
    one_by_one.add("q1", "apple pear", "sol1b", step=2, num_tokens=0)
    batched = ICLCorpus(BagOfWords(), per_prompt=2, keep="shortest")
    kept = batched.add_many(
        [
            ICLExample("q1", "apple pear", "sol1", 1, 1),
            ICLExample("q2", "apple plum", "sol2", 1, 1),
            ICLExample("q3", "train car", "sol3", 1, 1),
            ICLExample("q1", "apple pear", "sol1b", 2, 0),  # a second success of a prompt new in this call
        ]
    )
    assert kept == [True, True, True, True]
    assert batched.embedder.calls == 1 and one_by_one.embedder.calls == 3
    assert len(batched) == 3
    for q in ("q1", "q2", "q3"):
        assert batched.examples(q) == one_by_one.examples(q)
    assert batched.add_many([ICLExample("q2", "apple plum", "sol2c", 3, 5)]) == [True]
    assert batched.embedder.calls == 1  # a known prompt is not encoded again
    assert [e.prompt_id for e in batched.retrieve("q1", "apple pear", k=2)] == ["q2", "q3"]
    with pytest.raises(ValueError, match="num_tokens"):
        batched.add_many([ICLExample("q4", "boat", "s", 1, -1)])
    assert len(batched) == 3  # a bad success admits nothing of its call
