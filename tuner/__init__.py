"""ddltune tuner: sweep architectures × worker counts × bucket sizes and recommend one."""
