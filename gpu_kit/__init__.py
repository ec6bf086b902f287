"""The offline GPU kit: the GPU stack's wheels for a GPU machine that reaches no package index, in chunks small
enough for a narrow transfer (64 MiB a command), and one command there that runs the GPU path in stages.

- `prepare` (here, with the registry): what requirements-gpu.lock needs beyond the target image, as wheels, in
  numbered chunks with checksums (`make gpu-kit`).
- `install` (there, stdlib only): checks the chunks, reassembles them and installs the wheels into a venv laid over
  the image's own packages (its torch is never replaced).
- `run` (there, stdlib only): the GPU path in stages (machine, training, export and evaluation, timings, the tests
  marked `gpu`), each recorded as it ends, so a command cut off loses nothing and a re-run skips what is done.
"""
