"""Each benchmark owns one section of BENCHMARKS.md, between HTML-comment markers."""

import os
import re


def replace_section(path: str, name: str, body: str) -> None:
    """Writes `body` as section `name` of the Markdown file (added at the end once)."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    section = f"{begin}\n{body.strip()}\n{end}"
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else "# Benchmarks\n"
    if begin in text:
        text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: section, text,
                      flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
