"""Small helpers shared by the driver and the workers: logging, timing, run-folder paths."""
