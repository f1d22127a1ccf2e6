from __future__ import annotations

import unittest
import sys
import warnings

import numpy
import pytest

import cupy
from cupy import testing


class TestMatrixPower(unittest.TestCase):
    @testing.for_all_dtypes()
    @testing.numpy_cupy_allclose()
    def test_matrix_power_0(self, xp, dtype):
        a = testing.shaped_arange((3, 3), xp, dtype)
        return xp.linalg.matrix_power(a, 0)

    @testing.for_all_dtypes()
    @testing.numpy_cupy_allclose()
    def test_matrix_power_1(self, xp, dtype):
        a = testing.shaped_arange((3, 3), xp, dtype)
        return xp.linalg.matrix_power(a, 1)

    @testing.for_all_dtypes()
    @testing.numpy_cupy_allclose()
    def test_matrix_power_2(self, xp, dtype):
        a = testing.shaped_arange((3, 3), xp, dtype)
        return xp.linalg.matrix_power(a, 2)

    @testing.for_all_dtypes()
    @testing.numpy_cupy_allclose()
    def test_matrix_power_3(self, xp, dtype):
        a = testing.shaped_arange((3, 3), xp, dtype)
        return xp.linalg.matrix_power(a, 3)

    @testing.for_float_dtypes(no_float16=True)
    @testing.numpy_cupy_allclose(rtol=1e-5)
    def test_matrix_power_inv1(self, xp, dtype):
        a = testing.shaped_arange((3, 3), xp, dtype)
        a = a * a % 30
        return xp.linalg.matrix_power(a, -1)

    @testing.for_float_dtypes(no_float16=True)
    @testing.numpy_cupy_allclose(rtol=1e-5)
    def test_matrix_power_inv2(self, xp, dtype):
        a = testing.shaped_arange((3, 3), xp, dtype)
        a = a * a % 30
        return xp.linalg.matrix_power(a, -2)

    @testing.for_float_dtypes(no_float16=True)
    @testing.numpy_cupy_allclose(rtol=1e-4)
    def test_matrix_power_inv3(self, xp, dtype):
        a = testing.shaped_arange((3, 3), xp, dtype)
        a = a * a % 30
        return xp.linalg.matrix_power(a, -3)

    @testing.for_all_dtypes()
    @testing.numpy_cupy_allclose()
    def test_matrix_power_of_two(self, xp, dtype):
        a = xp.eye(23, k=17, dtype=dtype) + xp.eye(23, k=-6, dtype=dtype)
        return xp.linalg.matrix_power(a, 1 << 50)

    @testing.for_all_dtypes()
    @testing.numpy_cupy_allclose()
    def test_matrix_power_large(self, xp, dtype):
        a = xp.eye(23, k=17, dtype=dtype) + xp.eye(23, k=-6, dtype=dtype)
        return xp.linalg.matrix_power(a, 123456789123456789)

    @pytest.mark.skipif(sys.platform == "win32",
                        reason="python int overflows C long")
    @testing.for_float_dtypes(no_float16=True)
    @testing.numpy_cupy_allclose()
    def test_matrix_power_invlarge(self, xp, dtype):
        # TODO (ev-br): np 2.0: check if it's fixed in numpy 2 (broken on 1.26)
        a = xp.eye(23, k=17, dtype=dtype) + xp.eye(23, k=-6, dtype=dtype)
        return xp.linalg.matrix_power(a, -987654321987654321)


@pytest.mark.parametrize('shape', [
    (2, 3, 3),
    (3, 0, 0),
])
@pytest.mark.parametrize('n', [0, 5, -7])
class TestMatrixPowerBatched:

    @testing.for_float_dtypes(no_float16=True)
    @testing.numpy_cupy_allclose(rtol=5e-5)
    def test_matrix_power_batched(self, xp, dtype, shape, n):
        a = testing.shaped_arange(shape, xp, dtype)
        a += xp.identity(shape[-1], dtype)
        return xp.linalg.matrix_power(a, n)


@pytest.mark.parametrize('shapes', [
    ((3, 4), (4, 5)),
    ((1, 1), (1, 1)),
    ((5, 5), (5, 5)),
    ((1, 7), (7, 1)),
])
class TestLinalgMatmul2D:

    @testing.for_float_dtypes()
    @testing.numpy_cupy_allclose(atol=1e-3, rtol=1e-3)
    def test_matmul_2d(self, xp, dtype, shapes):
        shape_a, shape_b = shapes
        a = testing.shaped_random(shape_a, xp, dtype)
        b = testing.shaped_random(shape_b, xp, dtype)
        return xp.linalg.matmul(a, b)
