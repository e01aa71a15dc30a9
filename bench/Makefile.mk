# bench/: benchmark programs that print tables.
