"""What this machine or allocation is: the Slurm allocation and site launch settings, the system's
name and rank capacity, which cores a rank owns, the software installed and the environment."""
