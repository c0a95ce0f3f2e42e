"""torchserve-c's implementation of TorchServe's handler contract (the `ts` package).

User handlers written for TorchServe import these module paths unchanged. The code is ours; the
embedded interpreter of torchserve-c-worker puts this package first on sys.path.
"""

__version__ = "0.12.0+torchserve-c"
