"""One scaling-suite session: the checks before the first cell, the loop over cells, each cell's
evaluation and result."""
