"""CPU schedules: the default one by pattern kind (`default`), register-tiled reductions
(`tiling`), row-by-row kernels (`rows`)."""
