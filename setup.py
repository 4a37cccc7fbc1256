"""Which packages a build carries: everything, or with ``PEERWATCH_SERVICE_ONLY=1`` the
service alone (the container image's wheel: ``streams.lab``, the simulator, evaluation,
chaos runs and the demo, left out). The rest of the build is in pyproject.toml."""

import os

from setuptools import find_packages, setup

lab = ["streams.lab", "streams.lab.*"] if os.environ.get("PEERWATCH_SERVICE_ONLY") == "1" else []
setup(packages=find_packages(include=["streams*", "detectors*"], exclude=lab))
