"""Installs tofu-mx: the `tofu` package (pipeline stages), `operators_tdl` (operator descriptions) and the
`tofu` console command. The dependency pins follow shared/MXNET.md: mxnet 1.9.1 needs numpy < 1.24."""
from setuptools import find_packages, setup

setup(
    name="tofu-mx",
    version="0.1.0",
    description="Automatic dataflow-graph partitioning for MXNet training (a reimplementation of Tofu)",
    python_requires=">=3.11,<3.12",
    packages=find_packages(include=["tofu", "tofu.*", "operators_tdl", "operators_tdl.*"]),
    install_requires=["mxnet==1.9.1", "numpy==1.23.5", "scipy==1.15.3", "matplotlib==3.10.9",
                      "contourpy==1.3.2"],
    extras_require={"test": ["pytest==8.3.4"]},
    entry_points={"console_scripts": ["tofu=tofu.cli:command"]},
)
