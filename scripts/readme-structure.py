#!/usr/bin/env python3
"""The README's table of targets, generated from the comments above each target in Package.swift.

    scripts/readme-structure.py          rewrite the table in README.md
    scripts/readme-structure.py --check  exit 1 when README.md's table differs from Package.swift
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BEGIN = "<!-- targets: generated from Package.swift by `make readme-structure` -->"
END = "<!-- end of targets -->"
DECLARATION = re.compile(r'^\s*\.(target|executableTarget|systemLibrary)\(\s*(?:name:\s*"([^"]+)")?')
NAME = re.compile(r'name:\s*"([^"]+)"')


def targets(package: str):
    """(name, description) for each non-test target, its description the comment lines just above it."""
    lines = package.splitlines()
    found = []
    for index, line in enumerate(lines):
        match = DECLARATION.match(line)
        if not match:
            continue
        name = match.group(2)
        if name is None:
            following = "\n".join(lines[index:index + 3])
            name = NAME.search(following).group(1)
        comment = []
        above = index - 1
        while above >= 0 and lines[above].strip().startswith("//"):
            comment.insert(0, lines[above].strip()[2:].strip())
            above -= 1
        if not comment:
            sys.exit(f"Package.swift: target {name} has no comment saying what it owns")
        found.append((name, " ".join(comment)))
    return found


def table(package: str) -> str:
    rows = ["| target | owns |", "| --- | --- |"]
    rows += [f"| `{name}` | {description} |" for name, description in targets(package)]
    return "\n".join(rows)


def main() -> int:
    readme_path = ROOT / "README.md"
    readme = readme_path.read_text()
    if BEGIN not in readme or END not in readme:
        print(f"README.md: the markers {BEGIN} and {END} are missing", file=sys.stderr)
        return 1
    head, rest = readme.split(BEGIN, 1)
    current, tail = rest.split(END, 1)
    wanted = "\n" + table((ROOT / "Package.swift").read_text()) + "\n"
    if "--check" in sys.argv[1:]:
        if current != wanted:
            print("README.md's table of targets differs from Package.swift: run `make readme-structure`", file=sys.stderr)
            return 1
        return 0
    readme_path.write_text(head + BEGIN + wanted + END + tail)
    return 0


if __name__ == "__main__":
    sys.exit(main())
