"""The long-horizon history: the 5-minute points of the series a trend reads, kept for weeks."""
