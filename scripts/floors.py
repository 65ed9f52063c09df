"""Print a pip constraints file that pins every dependency to the lowest version pyproject allows.

    python3 scripts/floors.py > floors.txt
    pip install -c floors.txt -e . pytest pytest-timeout hypothesis

Reads [project].dependencies and the test runner's tools from the `dev` extra (pytest,
pytest-timeout, hypothesis), and writes `name==floor` for each: the floors CI installs to check
that they are true (a floor that pip cannot resolve, or that imports a build made for another
NumPy, fails there). A requirement without a `>=` floor is an error: every dependency needs one.
Standard library only, so it runs before anything is installed.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

TEST_TOOLS = ("pytest", "pytest-timeout", "hypothesis")
_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*>=\s*([0-9][0-9A-Za-z.]*)\s*(?:,.*)?(?:;.*)?$")


def floors(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    dev = {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]: r for r in project["optional-dependencies"]["dev"]}
    wanted = list(project["dependencies"]) + [dev[name] for name in TEST_TOOLS]
    pins = []
    for requirement in wanted:
        m = _REQ.match(requirement)
        if m is None:
            raise SystemExit(f"{pyproject}: {requirement!r} has no '>=' floor; give every dependency one")
        pins.append(f"{m.group(1)}=={m.group(2)}")
    return pins


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    print("\n".join(floors(root / "pyproject.toml")))
