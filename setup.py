"""Packaging beyond what pyproject.toml can say: the checkout keeps ``conf/`` (Hydra configs) and ``tasks/``
(shipped task data) at the repository's top level; the wheel maps them into the package as ``harness/conf`` and
``harness/data`` (harness/resources.py finds either). ``pip wheel .`` builds in a temporary folder, removed when
the build ends, so that it leaves no ``build/`` in the checkout (issue 33.5; tests/test_wheel.py)."""
import atexit
import shutil
import tempfile

from setuptools import find_namespace_packages, find_packages, setup
from setuptools.command.build import build

SHIPPED = {"harness.conf": "conf", "harness.data": "tasks"}


class TemporaryBuild(build):
    """``build`` (and every command that derives its folder from it: build_py, bdist_wheel) outside the checkout."""

    def initialize_options(self):
        super().initialize_options()
        self.build_base = tempfile.mkdtemp(prefix="decoding-harness-build-")
        atexit.register(shutil.rmtree, self.build_base, ignore_errors=True)


setup(
    # hydra_plugins is a namespace package (Hydra's plugin convention: no __init__.py), which find_packages skips
    packages=find_packages(include=["harness", "harness.*"])
    + find_namespace_packages(include=["hydra_plugins", "hydra_plugins.*"]) + list(SHIPPED),
    package_dir=SHIPPED,
    package_data={"harness": ["assets/**/*", "py.typed"], **{name: ["**/*"] for name in SHIPPED}},
    cmdclass={"build": TemporaryBuild},
)
