"""Rank 5, dask: Dask arrays in and out (``product``), host staging (``host``) and the
planner one level up (``cluster``, ``cluster_model``, ``cluster_text``). Imports
core and below; never interop. This face re-exports the ``tiledmm.dask`` names.
"""

from .cluster import cluster_plan
from .cluster_model import Cluster, ClusterPlan, k_bounds
from .host import from_host, release
from .product import RechunkWarning, current_cluster, explain, is_dask_array, matmul

__all__ = [
    "is_dask_array",
    "matmul",
    "explain",
    "current_cluster",
    "RechunkWarning",
    "Cluster",
    "ClusterPlan",
    "cluster_plan",
    "k_bounds",
    "from_host",
    "release",
]
