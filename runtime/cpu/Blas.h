// cpu/Blas.h - matrix products on the pool (not installed)
// defines: matmulInto
//
// OpenBLAS runs single-threaded: a product is split into row or column
// ranges of C, one OpenBLAS call per thread of the caller's team, so that
// OpenBLAS's own threads (which wait for work spinning on sched_yield)
// never run beside the pool's.
#pragma once

#include "Parallel.h"

#include <algorithm>
#include <cblas.h>
#include <cstdint>

namespace lwrt::cpu::detail {

/// Sets OpenBLAS to one thread, once per process (before its first product).
inline void blasSingleThreaded() {
  static const bool once = (openblas_set_num_threads(1), true);
  (void)once;
}

/// Row-major C = alpha op(A) op(B) + beta C through cblas.
inline void blasGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(std::max<int64_t>(1, lda)), b,
              static_cast<int>(std::max<int64_t>(1, ldb)), beta, c,
              static_cast<int>(std::max<int64_t>(1, ldc)));
}
inline void blasGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                     const double* a, int64_t lda, const double* b, int64_t ldb, double beta,
                     double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(std::max<int64_t>(1, lda)), b,
              static_cast<int>(std::max<int64_t>(1, ldb)), beta, c,
              static_cast<int>(std::max<int64_t>(1, ldc)));
}

/// C = alpha op(A) op(B) + beta C, also for empty products (BLAS may not
/// touch C when k is 0), on the calling thread's team: the longer of C's
/// dims is cut into one range per thread (in multiples of 16), each a
/// single-threaded call. Products under ~1 MFLOP stay on one thread.
template <typename T>
void matmulInto(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  blasSingleThreaded();
  const bool rows = m >= n;
  const int64_t len = rows ? m : n, blocks = (len + 15) / 16;
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int64_t grain = flops < 1e6 ? blocks : 1;
  parallelFor(blocks, grain, [&](int64_t first, int64_t last) {
    const int64_t lo = first * 16, hi = std::min(len, last * 16);
    if (rows)
      blasGemm(ta, tb, hi - lo, n, k, alpha, ta ? a + lo : a + lo * lda, lda, b, ldb, beta,
               c + lo * ldc, ldc);
    else
      blasGemm(ta, tb, m, hi - lo, k, alpha, a, lda, tb ? b + lo * ldb : b + lo, ldb, beta, c + lo,
               ldc);
  });
}

} // namespace lwrt::cpu::detail
