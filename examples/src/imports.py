"""A Python workload for examples/python_imports.stp: a few imports."""
import colorsys
import fractions

print(colorsys.rgb_to_hsv(0.2, 0.4, 0.4), fractions.Fraction(3, 6))
