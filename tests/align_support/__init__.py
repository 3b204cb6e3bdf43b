"""What the alignment tests need beside the package: the kernel's CPU twin and the compilers
that build it and check the CUDA source without a GPU."""
