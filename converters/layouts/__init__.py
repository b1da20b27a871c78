"""Where a checkpoint's files sit: the file names of a Hugging Face-style
folder (`hf`) and of a TorchSpec training run (`torchspec`), and which
entries of a training save are the draft's. Readers and writers import
file names from here, so each is spelled once."""
