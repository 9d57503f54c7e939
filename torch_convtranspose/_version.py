"""The package version: the one place it is written. setup.py/pyproject.toml
(setuptools reads it statically) and CMakeLists.txt (project VERSION) read it
from here."""

__version__ = "0.1.0"
