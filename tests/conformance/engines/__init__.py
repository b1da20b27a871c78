"""One harness per serving engine: each runs that engine release's own
config, model construction, weight loading and startup code on CPU over
draft folders, in a virtual environment of its own, and reports an
`Outcome` per case. The registry is `HARNESSES` in `..run`."""
