"""Packaging beyond what pyproject.toml can say: the checkout keeps ``conf/`` (Hydra configs) and ``tasks/``
(shipped task data) at the repository's top level; the wheel maps them into the package as ``harness/conf`` and
``harness/data`` (harness/resources.py finds either)."""
from setuptools import find_packages, setup

SHIPPED = {"harness.conf": "conf", "harness.data": "tasks"}

setup(
    packages=find_packages(include=["harness", "harness.*", "hydra_plugins", "hydra_plugins.*"]) + list(SHIPPED),
    package_dir=SHIPPED,
    package_data={"harness": ["assets/**/*", "py.typed"], **{name: ["**/*"] for name in SHIPPED}},
)
