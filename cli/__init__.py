"""The `dspark` command line: parse, call one library function, render."""
