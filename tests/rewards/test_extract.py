"""Answer and code-block extraction (pure string functions, no verifier)."""

import pytest

from xrpo_verl.rewards.extract import extract_answer, last_boxed, last_code_block, strip_think


@pytest.mark.parametrize(
    "response, expected",
    [
        (r"so \boxed{3} then \boxed{4}", "4"),  # the last box wins
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),  # nested braces
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),  # escaped braces do not count
        (r"the answer is \boxed 7.", "7."),  # `\boxed 7` form
        (r"\fbox{12}", "12"),
        (r"\boxed{ 5 }", "5"),
        (r"\boxed{a\\}", r"a\\"),  # `\\` is a line break, so the next `}` closes the box
    ],
)
def test_last_boxed_takes_the_last_balanced_box(response, expected):
    assert last_boxed(response).text == expected


@pytest.mark.parametrize(
    "response, reason",
    [
        ("no box here", "no \\boxed{}"),
        (r"\boxed{}", "empty"),
        (r"\boxed{\frac{1}{2}", "unbalanced"),
    ],
)
def test_last_boxed_says_why_nothing_was_found(response, reason):
    found = last_boxed(response)
    assert found.text is None and reason in found.reason


def test_answer_is_taken_after_think_block():
    assert extract_answer(r"<think>maybe \boxed{3}</think> final \boxed{4}").text == "4"
    # Inside <think> only: the model never gave a final answer.
    assert extract_answer(r"<think>maybe \boxed{3}</think> I am not sure").text is None
    unterminated = extract_answer(r"<think>maybe \boxed{3} ...")
    assert unterminated.text is None and "unterminated" in unterminated.reason
    assert strip_think("a</think>b</think>c").text == "c"


def test_other_answer_formats_in_priority_order():
    text = "work\n#### 1,234\n<answer> 7 </answer>\nThe final answer is $42$."
    assert extract_answer(text, ("hash",)).text == "1,234"
    assert extract_answer(text, ("answer_tag",)).text == "7"
    assert extract_answer(text, ("answer_line",)).text == "42"
    assert extract_answer(text, ("boxed", "answer_tag")).text == "7"  # no box: falls through
    assert extract_answer("Answer: 18\n", ("answer_line",)).text == "18"
    assert extract_answer("The answer isn't obvious.", ("answer_line",)).text is None
    missing = extract_answer("nothing", ("boxed", "hash"))
    assert missing.text is None and "boxed" in missing.reason and "####" in missing.reason


def test_unknown_answer_format_is_rejected_with_the_allowed_list():
    with pytest.raises(ValueError, match="answer_tag"):
        extract_answer("x", ("latex",))


def test_last_code_block_and_language():
    response = "```python\nprint(1)\n```\ntext\n```cpp\nint main(){}\n```\n"
    block = last_code_block(response)
    assert block.code == "int main(){}\n" and block.language == "cpp"
    assert last_code_block("```py\nx=1\n```").language == "python"
    assert last_code_block("```C++\nx\n```").language == "cpp"
    untagged = last_code_block("```\nprint(2)\n```")
    assert untagged.code == "print(2)\n" and untagged.language == ""
    assert last_code_block("```java\nclass A{}\n```").language == "java"


def test_code_block_missing_empty_or_only_in_think():
    assert last_code_block("just prose").code is None
    assert last_code_block("```python\n```").reason == "empty code block"
    thinking = last_code_block("<think>```python\nprint(1)\n```")
    assert thinking.code is None and "unterminated" in thinking.reason
    after = last_code_block("<think>```python\nprint(1)\n```</think>```python\nprint(2)\n```")
    assert after.code == "print(2)\n"
