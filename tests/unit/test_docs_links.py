"""Every relative link in README.md, SECURITY.md and docs/*.md resolves: the file exists, and an
``#anchor`` (in the same file or ``file.md#anchor``) names a heading there, by GitHub's slug rules."""
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO_ROOT / "README.md", REPO_ROOT / "SECURITY.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the target ends at whitespace (a title may follow) or ")"
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`[^`]*`")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower-case, punctuation other than ``-`` and
    ``_`` removed (letters and digits of any script kept), each space a ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)      # links keep their text
    text = re.sub(r"<[^>]+>", "", text)                              # inline HTML
    text = text.replace("`", "").replace("*", "")                    # code and emphasis marks
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in "-_ ")
    return text.replace(" ", "-")


def _lines_outside_fences(text: str):
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            yield line


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in _lines_outside_fences(path.read_text()):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    found |= set(re.findall(r'<a\s+(?:name|id)="([^"]+)"', path.read_text()))
    return found


def links(path: Path) -> list[str]:
    targets = []
    for line in _lines_outside_fences(path.read_text()):
        targets += LINK.findall(INLINE_CODE.sub("", line))
    return targets


def test_the_slug_rules():
    assert slug("Test-case evaluation: `POST /v1/evaluate`") == "test-case-evaluation-post-v1evaluate"
    assert slug("Operations: metrics, audit log, API key") == "operations-metrics-audit-log-api-key"
    assert slug("Hosts: cgroup v1, hybrid and v2") == "hosts-cgroup-v1-hybrid-and-v2"
    assert slug("`POST /run_code`") == "post-run_code"
    assert slug("Does a server slow down as it ages?") == "does-a-server-slow-down-as-it-ages"
    assert slug("Überblick: Größe") == "überblick-größe"


def test_duplicate_headings_are_numbered(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A\n\n## Sessions\n\n```\n# not a heading\n```\n\n## Sessions\n\n### Sessions\n")
    assert anchors(page) == {"a", "sessions", "sessions-1", "sessions-2"}


def test_the_documents_exist():
    assert (REPO_ROOT / "docs").is_dir()
    assert len(DOCUMENTS) >= 9, [d.name for d in DOCUMENTS]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves(document: Path):
    broken = []
    for target in links(document):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):     # http:, https:, mailto:, ...
            continue
        file_part, _, anchor = target.partition("#")
        linked = (document.parent / file_part).resolve() if file_part else document
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(REPO_ROOT) if linked.is_relative_to(REPO_ROOT) else linked}")
            continue
        if anchor:
            if linked.suffix != ".md":
                broken.append(f"{target}: an anchor into a file that is not markdown")
            elif anchor not in anchors(linked):
                broken.append(f"{target}: no heading with that anchor in {linked.name}")
    assert not broken, f"{document.relative_to(REPO_ROOT)} has broken links:\n  " + "\n  ".join(broken)
