"""Pull the final answer (math) or the final program (code) out of a model response.

Pure string functions: no sympy, no sandbox. The scorers call these first, so a response with
no answer is scored 0 with a reason and never reaches the (slow) verifier.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

AnswerFormat = Literal["boxed", "answer_tag", "hash", "answer_line"]
ANSWER_FORMATS: tuple[str, ...] = ("boxed", "answer_tag", "hash", "answer_line")

_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
_BOXED_COMMANDS = ("\\boxed", "\\fbox")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
# GSM8K's "#### 72" convention.
_HASH_LINE = re.compile(r"^[ \t]*####[ \t]*(.+?)[ \t]*$", re.MULTILINE)
# "Answer: 72", "The final answer is 72." (DAPO-Math's "Answer: $Answer" instruction).
_ANSWER_LINE = re.compile(r"(?:^|\n)[^\n]*?\banswer\s*(?:is\b|:)\s*([^\n]+)", re.IGNORECASE)
# ```lang\n ... ``` ; the info string may be empty. The closing fence must start a line.
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+#.-]*)[^\n]*\n(.*?)(?:\n```|^```)", re.DOTALL | re.MULTILINE)

_LANGUAGE_ALIASES = {
    "python": "python", "python3": "python", "py": "python", "py3": "python",
    "cpp": "cpp", "c++": "cpp", "cc": "cpp", "cxx": "cpp", "c++17": "cpp", "c++20": "cpp",
}  # fmt: skip


@dataclass(frozen=True)
class Extraction:
    """What was found in a response: `text` is None when nothing was found, and `reason` says why."""

    text: str | None
    reason: str = ""


def strip_think(response: str) -> Extraction:
    """Return the part of `response` after the last `</think>`.

    A `<think>` that is never closed means the model ran out of tokens while reasoning: there is
    no final answer, even if the reasoning contains a `\\boxed{}`.
    """
    close = response.rfind(_THINK_CLOSE)
    if close >= 0:
        return Extraction(response[close + len(_THINK_CLOSE) :])
    if _THINK_OPEN in response:
        return Extraction(None, "unterminated <think> block")
    return Extraction(response)


def _escaped(text: str, j: int) -> bool:
    """`\\{` is a literal brace, `\\\\{` is a line break then a group: count the backslashes."""
    k = j
    while k > 0 and text[k - 1] == "\\":
        k -= 1
    return (j - k) % 2 == 1


def last_boxed(text: str) -> Extraction:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5`), braces balanced."""
    start = max(text.rfind(cmd) for cmd in _BOXED_COMMANDS)
    if start < 0:
        return Extraction(None, "no \\boxed{} in response")
    i = start + (len("\\boxed") if text.startswith("\\boxed", start) else len("\\fbox"))
    if text.startswith(" ", i) and not text.startswith("{", i):  # `\boxed 5` form
        match = re.match(r" +([^\s$]+)", text[i:])
        return Extraction(match.group(1)) if match else Extraction(None, "empty \\boxed")
    if not text.startswith("{", i):
        return Extraction(None, "\\boxed without an argument")
    depth = 0
    for j in range(i, len(text)):
        if text[j] not in "{}" or _escaped(text, j):
            continue
        if text[j] == "{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                content = text[i + 1 : j].strip()
                return Extraction(content) if content else Extraction(None, "empty \\boxed{}")
    return Extraction(None, "unbalanced braces in the last \\boxed{")


def _last_regex(pattern: re.Pattern, text: str, what: str) -> Extraction:
    matches = pattern.findall(text)
    if not matches:
        return Extraction(None, f"no {what} in response")
    content = matches[-1].strip()
    return Extraction(content) if content else Extraction(None, f"empty {what}")


def _answer_line(text: str) -> Extraction:
    found = _last_regex(_ANSWER_LINE, text, "'Answer:' line")
    if found.text is None:
        return found
    # "Answer: $72$." -> "72"; a trailing period ends the sentence, it is not part of the answer.
    content = found.text.strip().rstrip(".").strip().strip("$").strip()
    return Extraction(content) if content else Extraction(None, "empty 'Answer:' line")


def extract_answer(response: str, formats: tuple[str, ...] = ("boxed",)) -> Extraction:
    """The final answer of a math response.

    Drops everything up to the last `</think>`, then tries each format in order and returns the
    first hit: `boxed` (last `\\boxed{}`), `answer_tag` (last `<answer>…</answer>`), `hash` (last
    GSM8K `#### x` line), `answer_line` (last `Answer: x` / `the final answer is x`).
    """
    for fmt in formats:
        if fmt not in ANSWER_FORMATS:
            raise ValueError(f"unknown answer format {fmt!r}; allowed: {list(ANSWER_FORMATS)}")
    if not formats:
        raise ValueError("formats is empty; give at least one of " + str(list(ANSWER_FORMATS)))
    body = strip_think(response)
    if body.text is None:
        return body
    reasons = []
    for fmt in formats:
        if fmt == "boxed":
            found = last_boxed(body.text)
        elif fmt == "answer_tag":
            found = _last_regex(_ANSWER_TAG, body.text, "<answer> tag")
        elif fmt == "hash":
            found = _last_regex(_HASH_LINE, body.text, "'####' line")
        else:
            found = _answer_line(body.text)
        if found.text is not None:
            return found
        reasons.append(found.reason)
    return Extraction(None, "; ".join(reasons))


@dataclass(frozen=True)
class CodeBlock:
    """The last fenced block: `language` is normalised (`python`/`cpp`), the raw tag, or ''."""

    code: str | None
    language: str = ""
    reason: str = ""


def normalise_language(tag: str) -> str:
    """`py`/`python3` -> `python`, `c++`/`cc` -> `cpp`; other tags come back lower-cased."""
    tag = tag.strip().lower()
    return _LANGUAGE_ALIASES.get(tag, tag)


def last_code_block(response: str) -> CodeBlock:
    """The last fenced code block after any `</think>`, with its normalised language tag."""
    body = strip_think(response)
    if body.text is None:
        return CodeBlock(None, reason=body.reason)
    blocks = _FENCE.findall(body.text)
    if not blocks:
        return CodeBlock(None, reason="no fenced code block in response")
    tag, code = blocks[-1]
    if not code.strip():
        return CodeBlock(None, normalise_language(tag), "empty code block")
    return CodeBlock(code + "\n", normalise_language(tag))
