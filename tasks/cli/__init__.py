"""The `baton` command line: parsing and dispatch in `main`, how results are printed in `views`."""
