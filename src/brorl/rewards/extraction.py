"""Answer extraction, in the parent process: pure Python, linear time, no catastrophic regexes.

What the graders see of a completion (the last ``\\boxed{}``, the text after "answer is", the text in
``<answer>`` tags) and the cheap checks that refuse an answer before any worker is asked (hidden
characters, hedges, nesting).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

# One token per brace-relevant event: a "\boxed{" / "\fbox{" opener, an escaped LaTeX brace (ignored,
# it is a literal brace, not a group), or a plain brace.  Every alternative matches a bounded amount of
# text, so finditer is linear in the input length.
_BOX_TOKEN = re.compile(r"\\(?:boxed|fbox)[ \t]{0,8}\{|\\[{}]|[{}]")
_ANSWER_MARKERS = ("answer is", "answer:", "answer =", "answer would be")
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")
_FALLBACK_TAIL_CHARS = 4000
# A hedged final answer ("142 (or maybe 143)", "\boxed{142 \text{ or } 143}") is not an answer: it scores 0.0
# unless the gold answer itself reads that way.
_HEDGE = re.compile(r"\b(?:or|maybe|perhaps|possibly|probably|either|unsure|not\s+sure)\b|\?", re.IGNORECASE)
# Arrows and ":=" at the top level of an answer are read as "=", so "143 \to 142" is the equation chain it
# means (and is judged as one, see _false_equation); tokens inside braces (\lim_{x \to 0}) are left alone.
_ARROW_OR_BRACE = re.compile(
    r"\\(?:to|rightarrow|Rightarrow|longrightarrow|Longrightarrow|implies)(?![A-Za-z])|:=|\\[{}]|[{}]"
)
_PERCENT = re.compile(r"\\?%")
# Spacing between digits: a space, LaTeX's spacing commands, a tie.
_SPACE = (r"(?:\s|~|\\[ ,;:!>]|\\(?:q?quad|enspace|thinspace|medspace|thickspace)(?![A-Za-z])"
          r"|\\hspace\*?\{[^{}]{0,20}\}|\{,\})")
# Digits grouped by thousands with spaces or thin spaces (1 000, 1\,000, 12\,345\,678): one number.
_THOUSANDS = re.compile(rf"(?<![\d.,])(-?\d{{1,3}})((?:{_SPACE}+\d{{3}})+)(?![\d.])")
_SPACE_RE = re.compile(f"{_SPACE}+")
# Two numbers side by side (12 13, 2\ 3): a list of values, which math-verify reads as their sum or product.
_JUXTAPOSED = re.compile(rf"(?<![\w.])-?\d+(?:\.\d+)?{_SPACE}+-?\.?\d")
# Characters that write a digit or a sign another way: any Unicode decimal digit (full-width, Arabic-Indic,
# Devanagari, mathematical bold...), full-width ASCII, the minus sign. Superscripts and circled digits are not
# digits (category No) and are left alone.
_UNICODE_MAP: dict[int, str] = {0x2212: "-"}
_VISIBLE_CONTROLS = "\t\n\r"
_OPENERS = "{(["
_CLOSERS = "})]"


def completion_text(completion: Any) -> str | None:
    """Return the text of a completion, or ``None`` if it has none.

    Accepts what TRL passes: a plain string, or a conversational completion (a list of message dicts,
    ``[{"role": "assistant", "content": ...}]``, where ``content`` may itself be a list of
    ``{"type": "text", "text": ...}`` parts).  For a message list the assistant messages are joined
    (tool-calling completions have several); a list without one gives ``None``.  ``bytes`` are decoded
    leniently.  Anything else -> ``None``.
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (bytes, bytearray)):
        return bytes(completion).decode("utf-8", errors="replace")
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)):
        parts: list[str] = []
        # Only the model's own turns: a list without an assistant turn has no completion text (another
        # role's text -- a prompt that contains the answer -- is never scored).  A message without a
        # role is the model's.
        assistant = [m for m in completion if isinstance(m, dict) and m.get("role", "assistant") == "assistant"]
        for message in assistant:
            content = message.get("content")
            if isinstance(content, str):
                parts.append(content)
            elif isinstance(content, (list, tuple)):
                for part in content:
                    if isinstance(part, str):
                        parts.append(part)
                    elif isinstance(part, dict) and isinstance(part.get("text"), str):
                        parts.append(part["text"])
        return "\n".join(parts) if parts else None
    return None


def _clean(text: str) -> str:
    """Make a short string safe to pickle and parse: drop NULs, replace lone surrogates."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", errors="replace").decode("utf-8", errors="replace")
    return text


def _has_hidden_characters(text: str) -> bool:
    """True if ``text`` holds a control, format or lone-surrogate character other than tab / newline: a NUL
    or a zero-width space inside "14\\x002" makes it read as 142 once dropped, so such an answer is refused."""
    return any(unicodedata.category(ch) in ("Cc", "Cf", "Cs") and ch not in _VISIBLE_CONTROLS for ch in text)


def _unicode_digits(text: str) -> str:
    """``text`` with every Unicode decimal digit as its ASCII digit, full-width ASCII (U+FF01-U+FF5E) as ASCII and
    U+2212 MINUS SIGN as ``-``: a right answer written ``１２`` or ``١٢`` is ``12``."""
    if text.isascii():
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if code < 128:
            out.append(ch)
        elif code in _UNICODE_MAP:
            out.append(_UNICODE_MAP[code])
        elif 0xFF01 <= code <= 0xFF5E:
            out.append(chr(code - 0xFEE0))
        elif unicodedata.category(ch) == "Nd":
            out.append(str(unicodedata.digit(ch)))
        else:
            out.append(ch)
    return "".join(out)


def _join_thousands(text: str) -> str:
    """Digit groups of three set off by spaces or thin spaces are one number: ``1\\,000`` is ``1000``."""
    if not any(ch.isdigit() for ch in text):
        return text
    return _THOUSANDS.sub(lambda m: m.group(1) + _SPACE_RE.sub("", m.group(2)), text)


def juxtaposed_numbers(text: str) -> bool:
    """True if ``text`` sets two numbers side by side with only spacing between them (``12 13``, ``2\\ 3``): a
    list of values, not one (math-verify reads ``12 13`` as 25 and ``2 3`` as 5)."""
    return _JUXTAPOSED.search(text) is not None


def _normalize_answer(text: str) -> str:
    """The answer as graded: percent signs dropped (``50\\%`` is ``50``: DeepScaleR's grader removes them,
    math-verify accepts the bare form), Unicode digits as ASCII (:func:`_unicode_digits`), thousands groups joined
    (:func:`_join_thousands`) and top-level arrows / ``:=`` read as ``=``."""
    text = _join_thousands(_unicode_digits(_PERCENT.sub("", text)))
    if "\\" not in text and ":=" not in text:
        return text
    out, depth, last = [], 0, 0
    for match in _ARROW_OR_BRACE.finditer(text):
        token = match.group()
        if token == "{":
            depth += 1
        elif token == "}":
            depth = max(0, depth - 1)
        elif token[0] == ":" or token[1] not in "{}":
            if depth == 0:
                out.append(text[last:match.start()] + " = ")
                last = match.end()
    return "".join(out) + text[last:]


def _nesting_depth(text: str) -> int:
    """Maximum nesting depth of ``{([`` brackets in ``text`` (linear; unbalanced closers ignored)."""
    depth = best = 0
    for ch in text:
        if ch in _OPENERS:
            depth += 1
            if depth > best:
                best = depth
        elif ch in _CLOSERS and depth:
            depth -= 1
    return best


def extract_boxed(text: str, scan_chars: int = 50_000) -> str | None:
    """Content of the last *complete* ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, else ``None``.

    "Last" means the one that opens last among those whose braces close, so a completion truncated in
    the middle of a final ``\\boxed{`` falls back to an earlier complete box, and a nested
    ``\\boxed{\\boxed{3}}`` yields ``3``.  Escaped braces ``\\{ \\}`` are literal and do not count.
    Only the last ``scan_chars`` characters are scanned (answers sit at the end); the scan is a single
    linear pass with a stack, so deeply nested or unclosed input cannot make it slow.
    """
    if not isinstance(text, str) or ("boxed" not in text and "fbox" not in text):
        return None
    window = text[-scan_chars:] if scan_chars and len(text) > scan_chars else text
    stack: list[int] = []  # content start for a box opener, -1 for a plain "{"
    best_start = -1
    best_end = -1
    for match in _BOX_TOKEN.finditer(window):
        token = match.group()
        if token[0] == "\\":
            if token[1] in "{}":
                continue  # escaped literal brace
            stack.append(match.end())
        elif token == "{":
            stack.append(-1)
        elif stack:  # "}"
            start = stack.pop()
            if start > best_start:
                best_start, best_end = start, match.start()
    if best_start < 0:
        return None
    return window[best_start:best_end]


def extract_math_answer(completion: Any, *, scan_chars: int = 50_000) -> tuple[str, str] | None:
    """Locate the final answer of a math completion.

    Returns ``(kind, answer)`` where ``kind`` is ``"boxed"`` (the answer is a bare LaTeX expression, to be
    parsed as ``\\boxed{answer}``) or ``"raw"`` (a short snippet containing ``$...$`` math, parsed as-is),
    or ``None`` when no answer can be found.  Only the text after the last ``</think>`` is searched (the
    reasoning is not the answer, as in the DeepScaleR grader); a completion that opens ``<think>`` and
    never closes it (truncated reasoning) has no answer.  Order of preference:

    1. the last complete ``\\boxed{...}``;
    2. the text after the last "answer is" / "answer:" (up to the end of that line);
    3. the last number in the completion's tail, unless its line lists it after another value ("12, 13",
       "12 | 13", "12 13") or ends a false computation with it ("3 + 4 = 8"), or hedges ("maybe 13").
    """
    text = completion_text(completion)
    if not text:
        return None
    think_end = text.rfind("</think>")
    if think_end >= 0:
        text = text[think_end + len("</think>"):]
    elif "<think>" in text:
        return None
    boxed = extract_boxed(text, scan_chars)
    if boxed is not None:
        return ("boxed", boxed)
    tail = text[-_FALLBACK_TAIL_CHARS:]
    lower = tail.lower()
    best_idx, best_marker = -1, ""
    for marker in _ANSWER_MARKERS:
        idx = lower.rfind(marker)
        if idx > best_idx:
            best_idx, best_marker = idx, marker
    if best_idx >= 0:
        snippet = tail[best_idx + len(best_marker):]
        newline = snippet.find("\n")
        if newline >= 0:
            snippet = snippet[:newline]
        snippet = snippet.strip().lstrip(":=").strip().rstrip(".").strip()
        if snippet:
            if "$" in snippet or "\\(" in snippet or "\\[" in snippet:
                return ("raw", snippet)
            return ("boxed", snippet)
    last = None
    for last in _NUMBER.finditer(tail):
        pass
    if last is None:
        return None
    # The last number must not be the last of a list on its line ("12, 13", "12 | 13", "12 13", "12 or 13") nor
    # the end of a false computation ("3 + 4 = 8"): a policy would learn to drop the box and hedge in prose if the
    # last value were paid. Prose between two numbers ("not 10, it is 12") leaves the last one the answer.
    line_start = tail.rfind("\n", 0, last.start()) + 1
    line_end = tail.find("\n", last.end())
    if _HEDGE.search(tail[line_start:line_end if line_end >= 0 else len(tail)]):  # "maybe 13", "12 or 13"
        return None
    line = tail[line_start:last.end()]
    before, after = line[:last.start() - line_start].rstrip()[-1:], tail[last.end():].lstrip()[:1]
    if before in _INSIDE_LATEX_BEFORE or after in _INSIDE_LATEX_AFTER:  # the 2 of \frac{1+\sqrt{5}}{2}, x^2
        return None
    numbers = list(_NUMBER.finditer(line))
    if len(numbers) > 1:
        joiner = line[numbers[-2].end():numbers[-1].start()]
        if _LIST_JOINER.fullmatch(joiner):
            return None
        if _COMPUTATION_JOINER.fullmatch(joiner):  # the arithmetic run that ends at the last number
            start = len(line)
            while start > 0 and line[start - 1] in _ARITHMETIC_CHARS:
                start -= 1
            if final_line_answer(line[start:]) is None:
                return None
    return ("boxed", last.group().replace(",", ""))


# What joins the last two numbers of a line when they are a list (12, 13 / 12 | 13 / 12 13 / 12 and 13) or a
# computation (3 + 4 = 7: checked by final_line_answer).
_LIST_JOINER = re.compile(r"\s*(?:[,;|&]|\\\\|\\(?:vee|lor|mid|cup)|and|vs\.?)?\s*", re.IGNORECASE)
_COMPUTATION_JOINER = re.compile(r"[\s()]*[=+\-*/×÷^][\s=+\-*/×÷^()]*")
_ARITHMETIC_CHARS = frozenset("0123456789.,+-*/()= \t")
# A number in a LaTeX group or script is part of an expression, not an answer on its own.
_INSIDE_LATEX_BEFORE = frozenset("{^_\\")
_INSIDE_LATEX_AFTER = frozenset("}^_")
# A final-line answer without tags (see final_line_answer): one number or one word, nothing else.
_FINAL_TOKEN = re.compile(r"-?\d+(?:\.\d+)?|[A-Za-z]+")
_ARITHMETIC = re.compile(r"[\d\s.+\-*/()]+")


def _arithmetic_value(expr: str) -> float | None:
    """Value of a plain arithmetic expression (numbers, + - * /, parentheses), else ``None``; no eval."""
    import ast

    if not _ARITHMETIC.fullmatch(expr) or len(expr) > 200:
        return None

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = value(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            a, b = value(node.left), value(node.right)
            if isinstance(node.op, ast.Div):
                return a / b if b else float("nan")
            return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
        raise ValueError
    try:
        return value(ast.parse(expr.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return None


def final_line_answer(text: str) -> str | None:
    """The answer a tagless completion states on its last non-empty line, or ``None``.

    Strict, for models that answer in prose (SmolLM2-135M never writes ``<answer>`` tags): the text after the
    last "answer is" / "answer:" / "answer =" / "answer would be" on that line, else the line itself; if that
    holds an equation, its right-most side -- and only when every side that is plain arithmetic has the same
    value (``1 + 6 = 7`` gives 7, ``1 + 6 = 8`` gives nothing). What is left, less one trailing period, must be
    one number or one word: hedges ("7 or 8"), several answers ("7, 8"), markup and hidden characters give
    ``None``.
    """
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    line = lines[-1]
    lower = line.lower()
    cut, marker = max((lower.rfind(m), m) for m in _ANSWER_MARKERS)
    snippet = line[cut + len(marker):].strip().lstrip(":") if cut >= 0 else line
    sides = [side.strip() for side in snippet.split("=")]
    answer = sides[-1].removesuffix(".").strip()
    if not _FINAL_TOKEN.fullmatch(answer):
        return None
    values = [v for v in map(_arithmetic_value, sides) if v is not None]
    if any(abs(v - values[0]) > 1e-9 or v != v for v in values):
        return None
    return answer


_ANSWER_TAG = re.compile(r"</?answer>")


def last_answer_tag(text: str) -> str | None:
    """Content of the ``<answer>...</answer>`` pair that opens last among those that close (matched like braces,
    so ``<answer><answer>7</answer></answer>`` gives ``7``, as ``\\boxed{\\boxed{7}}`` does), else ``None``."""
    if "</answer>" not in text:
        return None
    stack: list[int] = []
    best_start, best_end = -1, -1
    for match in _ANSWER_TAG.finditer(text):
        if match.group() == "<answer>":
            stack.append(match.end())
        elif stack:
            start = stack.pop()
            if start > best_start:
                best_start, best_end = start, match.start()
    return text[best_start:best_end] if best_start >= 0 else None


def extract_reasoning_gym_answer(completion: Any) -> str | None:
    """Answer text of a Reasoning Gym completion, or ``None``.

    Read where the math reward reads (:func:`extract_math_answer`): only the text after the last ``</think>``
    counts -- the reasoning is not the answer -- and a completion that opens ``<think>`` and never closes it
    (truncated reasoning) has no answer. In that text, the content of the last complete ``<answer>...</answer>``
    pair (innermost when nested; the ProRL convention, as ``reasoning_gym.utils.extract_answer`` without a regex),
    stripped; without a complete pair, the text itself. A completion with neither tags nor reasoning markers
    (prose, as SmolLM2-135M writes) has the answer its last line states (:func:`final_line_answer`) or none:
    reasoning-gym's own ``extract_answer`` gives none, and the whole prose would earn its scorers' partial
    credit (``len(gold) / len(text)`` when the gold occurs anywhere in it) for a hedge or a list of guesses.
    """
    text = completion_text(completion)
    if text is None:
        return None
    think_end = text.rfind("</think>")
    if think_end >= 0:
        text = text[think_end + len("</think>"):]
    elif "<think>" in text:
        return None
    tagged = last_answer_tag(text)
    if tagged is not None:
        return tagged.strip()
    if think_end >= 0:
        return text.strip()
    return final_line_answer(text)
