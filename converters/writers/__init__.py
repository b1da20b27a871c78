"""Everything dspark writes: safetensors shards streamed from a plan
(`safetensors`), the manifest that records them (`manifest`), and the
machinery that makes a written folder appear whole or not at all
(`atomic`). Import the module you need: nothing is loaded here, so
`dspark check` pays for none of it."""
