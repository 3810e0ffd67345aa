"""A Python workload for examples/python_imports.stp: a few imports.

It prints nothing itself, so its output never interleaves with pydyn's."""
import colorsys
import fractions

assert colorsys.rgb_to_hsv(0.2, 0.4, 0.4)[0] == 0.5 and fractions.Fraction(3, 6) == 0.5
