"""tiledmm on a Dask cluster vs one device vs dask.array.matmul (see tiledmm/bench/dask_bench.py).

On the two-H200 machine, from the repo root, inputs starting on the host (about 2-3 minutes
after set-up; rows written as measured):
    bash .whl/setup.sh && . /tmp/tiledmm-env && python3 benches/dask_bench.py --sizes 32768 \
        --reps 2 --alternatives 3 --vendor rows,plan --budget 240 --name h200x2-dask -o "$OUT"
On a CPU: python3 benches/dask_bench.py --quick
"""

import sys

from tiledmm.bench.dask_bench import main

if __name__ == "__main__":
    sys.exit(main())
