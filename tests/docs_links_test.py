#!/usr/bin/env python3
"""Every relative link in the repository's Markdown files leads somewhere, and every path of the
repository they name exists.

A link [text](path) or [text](path#anchor) in a tracked .md file must name a file or folder that
exists, relative to the linking file, and its anchor must be a heading of the target Markdown
file (or of the linking file, for a bare #anchor), slugged as GitHub does: lower case, every
character but letters, digits, spaces, hyphens and underscores dropped, spaces turned into
hyphens, and -1, -2, ... added to repeats. Links to web addresses are not followed. Code spans
and fenced code blocks are skipped.

A path the text names, in prose, code spans or commands (`experiments/scaling.json`,
`scripts/report.sh --short`), must exist when it starts with one of the repository's folders
(core/, strategies/, experiments/, scripts/, tests/, model/, plotting/, report/, cmake/, .ci/,
results/reference/), relative to the repository's root or to the file. Outputs that runs write
elsewhere (results/<name>.json, build/) are not checked; a name with a wildcard or placeholder
is checked up to its last folder.

    docs_links_test.py [REPO_ROOT]     (default: this file's repository)

Prints one line per broken link (file:line: link: why) and exits 1 when there is any.
"""
import functools
import os
import re
import subprocess
import sys

LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
REPO_PATH = re.compile(
    r"(?<![A-Za-z0-9_./$-])((?:core|strategies|experiments|scripts|tests|model|plotting|report|cmake|"
    r"\.ci|results/reference)/[A-Za-z0-9_./+-]*[A-Za-z0-9_/])(?![A-Za-z0-9_*<{$-])")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading):
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link in a heading: its text
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def lines_outside_fences(path):
    """(line number, text) of every line outside fenced code blocks."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
            elif not fenced:
                yield number, line


def lines_outside_code(path):
    """lines_outside_fences with code spans removed."""
    for number, line in lines_outside_fences(path):
        yield number, re.sub(r"`[^`]*`", "", line)


@functools.lru_cache(maxsize=None)
def anchors(path):
    """The anchors of a Markdown file's headings (a code span in one keeps its text)."""
    seen, found = {}, set()
    for _, line in lines_outside_fences(path):
        m = HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else "%s-%d" % (base, n))
    return frozenset(found)


def markdown_files(root):
    """The tracked .md files; in a copy without git, every .md file outside build folders."""
    try:
        listed = subprocess.run(["git", "-C", root, "ls-files", "*.md"], capture_output=True,
                                text=True)
        if listed.returncode == 0:
            return listed.stdout.split()
    except OSError:
        pass
    found = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders
                               if not d.startswith((".", "build")) and d != "gpu-bundle")
        found += [os.path.relpath(os.path.join(folder, n), root) for n in sorted(names)
                  if n.endswith(".md")]
    return found


def broken_links(root):
    files = markdown_files(root)
    problems = []
    for name in files:
        path = os.path.join(root, name)
        if not os.path.exists(path):
            continue  # deleted in the work tree, not yet in the index
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                for m in REPO_PATH.finditer(line):
                    named = m.group(1)
                    if not (os.path.exists(os.path.join(root, named)) or
                            os.path.exists(os.path.join(os.path.dirname(path), named))):
                        problems.append("%s:%d: %s: no such file or folder" % (name, number, named))
        for number, line in lines_outside_code(path):
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                file_part, _, anchor = target.partition("#")
                where = (os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                         if file_part else path)
                if not os.path.exists(where):
                    problems.append("%s:%d: %s: no such file" % (name, number, target))
                    continue
                if anchor and where.endswith(".md") and anchor not in anchors(where):
                    problems.append("%s:%d: %s: no heading '%s' in %s" %
                                    (name, number, target, anchor, os.path.relpath(where, root)))
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = broken_links(os.path.abspath(root))
    for p in problems:
        print(p)
    if problems:
        print("docs_links_test: %d broken link(s) or missing path(s)" % len(problems))
        return 1
    print("docs_links_test: every relative link resolves, every path named exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
