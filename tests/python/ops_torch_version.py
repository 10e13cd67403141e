"""python/mlip_ase and the LibTorch that libmlip_ops.so was built against: the build writes the
version beside the library; a library stamped with another version is refused with one message
naming both, the library stamped with this torch loads.

Usage: PYTHON ops_torch_version.py LIBMLIP_OPS_SO PYTHON_PACKAGE_DIR (exit 77: no ase here)
"""
import os
import shutil
import sys
import tempfile

try:
    import ase  # noqa: F401  (mlip_ase imports it)
except ImportError:
    sys.exit(77)
import torch

sys.path.insert(0, sys.argv[2])
from mlip_ase.calculator import load_ops_library  # noqa: E402

library = os.path.abspath(sys.argv[1])
stamp = os.path.splitext(library)[0] + ".torch-version"
with open(stamp) as f:
    built = f.read().strip()
release = torch.__version__.split("+")[0]
assert built == release, f"{stamp} says {built!r}; this Python's torch is {torch.__version__}"

with tempfile.TemporaryDirectory() as tmp:
    other = os.path.join(tmp, "libmlip_ops.so")
    shutil.copy(library, other)
    with open(os.path.join(tmp, "libmlip_ops.torch-version"), "w") as f:
        f.write("1.13.1\n")
    try:
        load_ops_library(other)
        sys.exit("FAILED: a library stamped 1.13.1 loaded into torch " + torch.__version__)
    except RuntimeError as error:
        message = str(error)
    for part in ("built against LibTorch 1.13.1", f"this Python has torch {torch.__version__}",
                 "pip install torch==1.13.1"):
        assert part in message, f"{part!r} not in: {message}"
    print("refused:", message)

load_ops_library(library)
assert hasattr(torch.ops.mlip, "tabulated_embedding") or len(dir(torch.ops.mlip)) > 0
print("loaded", library, "into torch", torch.__version__)
