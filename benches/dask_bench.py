"""tiledmm on a Dask cluster vs one device vs dask.array.matmul (see tiledmm/dask_bench.py).

On the two-H200 machine, from the repo root:
    python3 benches/dask_bench.py --sizes 32768 --name h200x2-dask -o benches/results
Smaller first: --sizes 8192,16384.  On a CPU: python3 benches/dask_bench.py --quick
"""

import sys

from tiledmm.dask_bench import main

if __name__ == "__main__":
    sys.exit(main())
