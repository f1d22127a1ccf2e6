"""tiledmm's built-in backends (import name ``tiledmm_backends``), one package each.

They register through the ``tiledmm`` entry-point group exactly as third-party plugins do.
``kernels/`` holds the C sources shared by the CuPy (CUDA) and OpenCL backends.
"""
