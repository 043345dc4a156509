#!/usr/bin/env python3
"""The messages the docs quote are the messages the code prints.

Every inline code span in docs/*.md and README.md that quotes a message (it holds a failure word:
"failed", "timed out", "refused", "must be", ...) is cut at its placeholders (NAME, MS, R,
HOST:PORT, <error>, …) and its punctuation; each remaining phrase of 6 characters or more must
appear in the project's non-test sources, with adjacent C++ string literals joined first (a
message is often split over lines). A reworded message leaves its old phrase in the docs, and
this test names the doc, the quote and the phrase. It cannot see a reordering of phrases.

Usage: quoted_messages_test.py ROOT
"""
import os
import re
import subprocess
import sys

FAILURE_WORDS = re.compile(
    r"\b(failed|timed out|refused|must be|cannot|is missing|is unexpected|not found|exceeds|"
    r"out of memory|closed its connection|did not)\b")
# Placeholders (an upper-case token, <name>, …, numbers) and punctuation cut a quote into phrases.
CUTS = re.compile(r"[:;()\[\]…{}\"]|\.\.\.|<[^>]*>|\b[A-Z][A-Z_]*\b|\d+")
MIN_PHRASE = 6
# Quotes of commands and flags, not messages.
COMMAND_PREFIXES = ("-", "ddpctl ", "bash ", "scripts/")


def sources(root):
    listed = subprocess.check_output(
        ["git", "-C", root, "ls-files", "*.cpp", "*.h", "*.cu", "*.cuh", "*.py", "*.sh"], text=True)
    text = "".join(
        open(os.path.join(root, f), errors="ignore").read() for f in listed.split()
        if not f.startswith(("tests/", "docs/")))
    return re.sub(r'"\s*\n\s*"', "", text)  # "a " "b" split over lines is "a b"


def quotes(path):
    text = re.sub(r"```.*?```", "", open(path).read(), flags=re.S)
    for paragraph in text.split("\n\n"):
        for span in re.sub(r"\s+", " ", paragraph).split("`")[1::2]:
            if FAILURE_WORDS.search(span) and not span.startswith(COMMAND_PREFIXES):
                yield span


def main(root):
    code = sources(root)
    docs = sorted(os.path.join(root, "docs", f) for f in os.listdir(os.path.join(root, "docs"))
                  if f.endswith(".md")) + [os.path.join(root, "README.md")]
    checked, failures = 0, []
    for doc in docs:
        for quote in quotes(doc):
            phrases = [p.strip(" ,.'") for p in CUTS.split(quote)]
            phrases = [p for p in phrases if len(p) >= MIN_PHRASE]
            if not phrases:
                continue
            checked += 1
            missing = [p for p in phrases if p not in code]
            if missing:
                failures.append(f"{os.path.relpath(doc, root)}: `{quote}`: not in the code: "
                                + "; ".join(repr(p) for p in missing))
    print(f"{checked} quoted messages checked against the sources")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
