#!/usr/bin/env python3
"""Relative links in the repository's Markdown files point at something.

    python3 tools/check_docs.py [REPO]

For every `[text](target)` in README.md, docs/*.md and the other tracked
Markdown files (not under build*/), a target that is not a URL must name a
file or folder relative to the linking file, and a `#anchor` (alone or after
a .md file) a heading of that file, spelled as GitHub spells anchors
(lower case, punctuation dropped, spaces as hyphens). Prints each broken link
as FILE:LINE: TARGET (why) and exits 1 if there is one.
"""

import os
import re
import sys

LINK = re.compile(r"\[(?:[^\]\n]|\][^(])*?\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def markdown_files(root):
    for folder, dirs, files in os.walk(root):
        rel = os.path.relpath(folder, root)
        dirs[:] = [d for d in dirs if not d.startswith((".", "build"))]
        if rel != "." and rel.split(os.sep)[0].startswith((".", "build")):
            continue
        for f in files:
            if f.endswith(".md"):
                yield os.path.join(folder, f)


def anchors(path):
    """GitHub's anchors of the headings of a Markdown file."""
    found, seen, fenced = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if FENCE.match(line):
            fenced = not fenced
        if fenced or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip()
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def links(path):
    fenced = False
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for m in LINK.finditer(re.sub(r"`[^`]*`", "``", line)):
            yield number, m.group(1)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    broken, checked = [], 0
    for path in sorted(markdown_files(root)):
        for number, target in links(path):
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            checked += 1
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            where = f"{os.path.relpath(path, root)}:{number}: {target}"
            if not os.path.exists(dest):
                broken.append(f"{where} (no such file)")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                broken.append(f"{where} (no heading with that anchor)")
    for b in broken:
        print(b)
    print(f"{checked} links checked, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
