"""What each HLO op costs: the shape-keyed op tables, per-population distributions, kinds and families, source lines, named kernels, the HLO's own patterns and the roofline of every op."""
