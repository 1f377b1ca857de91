"""train / evaluate / recommend / data commands (to be written)."""
