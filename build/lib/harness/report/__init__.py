"""What a session shows: text tables, the HTML report and its plots, time-to-train projections,
collective bandwidth bounds, and two results files compared."""
