# Stands for a machine without matplotlib (PYTHONPATH=validation/cases/no_matplotlib): importing it fails.
raise ImportError("No module named 'matplotlib' (validation/cases/no_matplotlib)")
