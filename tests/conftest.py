# torch first: an in-process pytester run that imports torch for the first time crashes the next.
import torch  # noqa: F401

pytest_plugins = ["pytester"]
