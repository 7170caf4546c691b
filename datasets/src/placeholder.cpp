// Replaced by the NIfTI reader (issue #4).
