# torch first: an in-process pytester run that imports torch for the first time crashes the next.
import torch

# torch.profiler imports inductor's config on first use; importing it once here keeps a second
# in-process pytester run from registering its op library twice.
import torch._inductor.config  # noqa: F401

pytest_plugins = ["pytester"]
