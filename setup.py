"""Packaging: the five top-level folders install as subpackages of one ``edgesmith`` package.

The repository root is the ``edgesmith`` package (its ``__init__.py`` is the public API), so
``pip install .`` puts only ``edgesmith`` into site-packages: ``edgesmith.models``,
``edgesmith.compress``, ``edgesmith.hardware``, ``edgesmith.runtimes`` and ``edgesmith.bench``,
never top-level ``models`` or ``bench`` packages that would clash with a user's own.
Everything else about the distribution is in pyproject.toml.
"""
from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

PACKAGES = ("compress", "runtimes", "models", "hardware", "bench", "common")


class BuildPy(build_py):
    """Leave this file out of the installed ``edgesmith`` package (the root's other modules go in)."""

    def find_package_modules(self, package, package_dir):
        found = super().find_package_modules(package, package_dir)
        return [m for m in found if not (package == "edgesmith" and m[1] == "setup")]


setup(
    packages=["edgesmith"] + [f"edgesmith.{p}" for p in find_packages(include=[f"{n}*" for n in PACKAGES])],
    package_dir={"edgesmith": "."},
    cmdclass={"build_py": BuildPy},
)
