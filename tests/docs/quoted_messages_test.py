#!/usr/bin/env python3
"""The messages the docs quote are the messages the code prints.

Every inline code span in docs/*.md and README.md that quotes a message (it holds a failure word:
"failed", "timed out", "refused", "must be", ...) is cut at its placeholders (NAME, MS, R,
HOST:PORT, <error>, …) and its punctuation; each remaining phrase of 6 characters or more must
appear in the project's non-test sources, with adjacent C++ string literals joined first (a
message is often split over lines). A reworded message leaves its old phrase in the docs, and
this test names the doc, the quote and the phrase. It cannot see a reordering of phrases.

The README is checked against the code further (check_readme):
- it is at most 150 lines, and names no commit (a word of 7 to 40 hex digits, with a digit and a
  letter): the history of figures lives in docs/performance.md;
- every repository path it names (a word with a slash in backticks or a code block, or a link)
  exists, and a link's #anchor is a heading of the page it points to;
- the lines its quick start says a command prints last are the code's, phrase by phrase;
- with BIN (the folder of ddpctl, ddpd-coordinator and ddpd-worker), every command line it quotes
  for those programs names subcommands and flags that `PROGRAM ... --help` lists, and every flag
  it quotes alone (`--flag`) is one of theirs.

Usage: quoted_messages_test.py ROOT [BIN]
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


README_MAX_LINES = 150
COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
PROGRAMS = ("ddpctl", "ddpd-coordinator", "ddpd-worker", "ddpd-train")
SHELL_STOPS = ("#", "|", "||", "&", "&&", ";", ">", "<")


def inline_spans(text):
    """The inline code spans of a markdown text, code blocks left out."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for paragraph in text.split("\n\n"):
        yield from re.sub(r"\s+", " ", paragraph).split("`")[1::2]


def code_block_lines(text):
    for block in re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S):
        yield from block.splitlines()


def slug(heading):
    """GitHub's anchor for a heading."""
    heading = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return heading.replace(" ", "-")


def anchors(path):
    text = re.sub(r"```.*?```", "", open(path).read(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#+\s+(.*)$", text, flags=re.M)}


def named_paths(text):
    """Repository paths the text names: link targets, and words with a slash in code."""
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"[a-z]+:", target):
            yield target
    words = [w for span in inline_spans(text) for w in span.split()]
    words += [w for line in code_block_lines(text) for w in line.split("#")[0].split()]
    for word in words:
        word = word.strip("()[],;'\"")
        if "/" not in word or re.search(r"[$<>*{}|=:~…]", word) or word.startswith(("/", "-")):
            continue
        if word.startswith(("build/", ".venv/", "build-deps/", "../")):
            continue  # build outputs, the environment set-up makes, the shared folder
        yield word


class Help:
    """Subcommands and flags of a program's commands, from their --help (cached)."""

    def __init__(self, bin_dir):
        self.bin_dir, self.cache = bin_dir, {}

    def available(self, program):
        return os.access(os.path.join(self.bin_dir, program), os.X_OK)

    def of(self, path):
        if path not in self.cache:
            out = subprocess.run([os.path.join(self.bin_dir, path[0]), *path[1:], "--help"],
                                 capture_output=True, text=True, timeout=60).stdout
            flags, subcommands, section = set(), set(), ""
            for line in out.splitlines():
                if re.match(r"^\S.*:$", line):
                    section = line
                elif section == "Subcommands:" and line.startswith("  "):
                    subcommands.add(line.split()[0])
                elif line.lstrip().startswith("-"):
                    flags.update(re.findall(r"(?<![\w-])--?[A-Za-z0-9][\w-]*", line.split()[0]))
            self.cache[path] = (flags, subcommands)
        return self.cache[path]

    def all_flags(self, path):
        flags, subcommands = self.of(path)
        flags = set(flags)
        for sub in subcommands:
            flags |= self.all_flags(path + (sub,))
        return flags


def check_command(help_, words):
    """Walks one quoted command line; returns what its program does not know."""
    path, problems = (words[0],), []
    for word in words[1:]:
        if word in SHELL_STOPS or word.startswith("#"):
            break
        flags, subcommands = help_.of(path)
        if word.startswith("-"):
            flag = word.split("=")[0]
            known = set().union(*(help_.of(path[:i])[0] for i in range(1, len(path) + 1)))
            if flag not in known:
                problems.append(f"{' '.join(path)} has no flag {flag}")
        elif word in subcommands:
            path += (word,)
    return problems


def check_readme(root, bin_dir):
    path = os.path.join(root, "README.md")
    text = open(path).read()
    failures = []
    lines = text.count("\n")
    if lines > README_MAX_LINES:
        failures.append(f"README.md has {lines} lines (at most {README_MAX_LINES})")
    for number, line in enumerate(text.splitlines(), 1):
        for word in COMMIT_HASH.findall(line):
            failures.append(f"README.md:{number}: a commit hash, {word} (docs/performance.md)")
    paths = 0
    for named in named_paths(text):
        paths += 1
        file, _, anchor = named.partition("#")
        target = os.path.normpath(os.path.join(root, file)) if file else path
        if not os.path.exists(target):
            failures.append(f"README.md names {named}, which does not exist")
        elif anchor and target.endswith(".md") and anchor not in anchors(target):
            failures.append(f"README.md links {named}: no such heading in {file or 'README.md'}")
    code = sources(root)
    quick_start = re.search(r"^## Quick start\n(.*?)(?=^## )", text, flags=re.M | re.S)
    printed = [s for s in inline_spans(quick_start.group(1) if quick_start else "")
               if " " in s and not s.startswith(COMMAND_PREFIXES)]
    for quote in printed:
        phrases = [p.strip(" ,.'") for p in CUTS.split(quote)]
        missing = [p for p in phrases if len(p) >= MIN_PHRASE and p not in code]
        if missing:
            failures.append(f"README.md quick start prints `{quote}`: not in the code: "
                            + "; ".join(repr(p) for p in missing))
    if not printed:
        failures.append("README.md: no line its quick start prints was found to check")
    print(f"README.md: {lines} lines, {paths} paths, {len(printed)} printed lines checked")
    if not bin_dir:
        print("README.md: commands not checked (no BIN given)")
        return failures
    help_ = Help(bin_dir)
    commands = 0
    candidates = list(code_block_lines(text)) + list(inline_spans(text))
    for line in candidates:
        words = line.replace("$ ", "", 1).split() if line.startswith("$ ") else line.split()
        while words and os.path.basename(words[0]) not in PROGRAMS:
            words = words[1:] if words[0] in ("sudo", "exec") or "=" in words[0] else []
        if not words:
            continue
        words[0] = os.path.basename(words[0])
        if not help_.available(words[0]):
            failures.append(f"README.md quotes {words[0]}, which is not in {bin_dir}")
            continue
        commands += 1
        failures += [f"README.md: `{line.strip()}`: {p}" for p in check_command(help_, words)]
    known = set().union(*(help_.all_flags((p,)) for p in PROGRAMS if help_.available(p)))
    alone = [s.split()[0] for s in inline_spans(text) if re.match(r"--[a-z]", s)]
    for flag in alone:
        if flag.split("=")[0] not in known:
            failures.append(f"README.md quotes {flag}, which no program's --help lists")
    print(f"README.md: {commands} command lines and {len(alone)} flags checked against --help")
    return failures


def main(root, bin_dir=None):
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
    failures += check_readme(root, bin_dir)
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
