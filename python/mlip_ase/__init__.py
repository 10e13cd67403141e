"""ASE calculator for mlip model files (model.pt)."""
from .calculator import MLIPCalculator, load_model, load_ops_library

__all__ = ["MLIPCalculator", "load_model", "load_ops_library"]
__version__ = "0.1.0"
