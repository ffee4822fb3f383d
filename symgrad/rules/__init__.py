"""The bottom layer: the rule table (``derivatives.yaml``), its loader and validation, the formula
vocabulary, the printers that turn formulas into Python, and the on-disk cache they share.

Everything above reads op facts and derivatives from here; nothing here imports another part of
symgrad.
"""
