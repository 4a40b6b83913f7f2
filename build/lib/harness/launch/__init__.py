"""Starting a cell's ranks through a real launcher, watching them and ending every process."""
