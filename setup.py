"""The one build step pyproject.toml cannot declare: the chapters go into the wheel.

The chapter notebooks live in notebooks/ (where JupyterLab, nbval and the book read them); a wheel
gets a copy under kit/chapters/, so `pip install <wheel>` alone is enough to learn from
(`python -m kit chapters DIR` copies them out, `python -m kit lab` opens them). An editable install
needs no copy: kit finds the checkout's notebooks/ beside it. Everything else is in pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
CHAPTERS = "[0-9][0-9]_*.ipynb"  # kit.__main__.CHAPTER_GLOB


class build_py_with_chapters(build_py):  # noqa: N801 (setuptools' command naming)
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        chapters = sorted((ROOT / "notebooks").glob(CHAPTERS))
        if not chapters:
            raise SystemExit(
                f"no chapters in {ROOT / 'notebooks'} ({CHAPTERS}): a wheel of kit without them cannot teach; "
                "build from a checkout of kit or from its sdist, which both hold notebooks/"
            )
        target = Path(self.build_lib) / "kit" / "chapters"
        shutil.rmtree(target, ignore_errors=True)  # no chapter left over from an earlier build
        target.mkdir(parents=True)
        for path in chapters:
            shutil.copyfile(path, target / path.name)


setup(cmdclass={"build_py": build_py_with_chapters})
