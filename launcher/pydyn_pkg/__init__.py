"""pydyn: SystemTap-style dynamic instrumentation for 64-bit and 32-bit processes.

The top-level package (`launcher/pydyn_pkg/` in the source tree); `pydyn.launcher`,
`pydyn.runtime` and `pydyn.shmlayout` are mapped from their own directories
(pyproject.toml).  `python -m pydyn` runs the command line.
"""
