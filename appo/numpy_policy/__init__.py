"""Trained policies in numpy alone: the numpy passes of every model kind (registry.py: `NUMPY_PASSES` by model
kind), the npz policy file and `Policy` (appo.load_policy). Nothing in this package imports torch."""
