"""What a session measures: cells, the matrix of cells and workload profiles, and the options."""
