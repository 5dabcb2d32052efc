// mlx-agent M5 Q4 prefill kernel: y[rows, N] = x[rows, K] @ dequantize(w, scales, biases)^T
//
// x       half   [rows, K]       activations (rows >= 128 is the caller's rule)
// w       uint32 [N, K / 8]      affine 4-bit weights, eight per word, value j in bits 4j..4j+3
// scales  half   [N, K / 64]     one scale per group of 64 weights
// biases  half   [N, K / 64]     one bias per group of 64 weights
// y       half   [rows, N]
//
// K and N are template constants (multiples of 64), so each matrix shape is compiled once. A threadgroup of
// four simdgroups (128 threads) computes one BM x BN tile of y; each simdgroup owns a 16 x 16 quarter of it
// as 2 x 2 simdgroup 8x8 float accumulators. The K dimension is walked in tiles of BK = 64 (one quantization
// group): the x tile is copied into threadgroup memory as float (rows past the end read as 0), the weight
// tile is dequantized there as float (scale * q + bias), and the accumulators take the tile eight columns
// at a time, in order. The tile of y goes back through threadgroup memory so rows past the end are not
// written. mlx_agent/runtime/accel/m5_prefill.py `emulate` performs the same arithmetic in this order in MLX.
//
// The file has two parts, split at the marker lines: the header (included before the kernel function)
// and the body (the kernel function's body; mx.fast.metal_kernel writes the signature).

// --- header ---
#include <metal_simdgroup_matrix>

constant constexpr int BM = 32;   // rows of y per threadgroup
constant constexpr int BN = 32;   // columns of y per threadgroup
constant constexpr int BK = 64;   // K per tile: one quantization group
constant constexpr int LD = BK + 4;   // threadgroup row stride in floats (padding against bank conflicts)
constant constexpr int THREADS = 128;

// --- body ---
const int rows = int(x_shape[0]);
const int tid = int(thread_index_in_threadgroup);
const int sg = int(simdgroup_index_in_threadgroup);
const int row0 = int(threadgroup_position_in_grid.y) * BM;
const int col0 = int(threadgroup_position_in_grid.x) * BN;
const int sg_row = (sg / 2) * 16;
const int sg_col = (sg % 2) * 16;
constexpr int WORDS = K / 8;    // words of one weight row
constexpr int GROUPS = K / BK;  // quantization groups of one weight row

threadgroup float xs[BM * LD];
threadgroup float ws[BN * LD];

metal::simdgroup_float8x8 acc[2][2];
for (int i = 0; i < 2; ++i) {
  for (int j = 0; j < 2; ++j) {
    acc[i][j] = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  }
}

for (int kt = 0; kt < K; kt += BK) {
  for (int e = tid; e < BM * BK; e += THREADS) {
    const int r = e / BK;
    const int c = e % BK;
    const int gr = row0 + r;
    xs[r * LD + c] = gr < rows ? float(x[size_t(gr) * K + kt + c]) : 0.0f;
  }
  for (int e = tid; e < BN * (BK / 8); e += THREADS) {
    const int n = e / (BK / 8);
    const int word_index = e % (BK / 8);
    const int gn = col0 + n;
    const uint word = w[size_t(gn) * WORDS + kt / 8 + word_index];
    const float scale = float(scales[size_t(gn) * GROUPS + kt / BK]);
    const float bias = float(biases[size_t(gn) * GROUPS + kt / BK]);
    for (int j = 0; j < 8; ++j) {
      const float q = float((word >> (4 * j)) & 0xFu);
      ws[n * LD + word_index * 8 + j] = scale * q + bias;
    }
  }
  metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  for (int kk = 0; kk < BK; kk += 8) {
    metal::simdgroup_float8x8 a[2];
    metal::simdgroup_float8x8 b[2];
    for (int i = 0; i < 2; ++i) {
      metal::simdgroup_load(a[i], xs + (sg_row + 8 * i) * LD + kk, LD);
    }
    for (int j = 0; j < 2; ++j) {
      metal::simdgroup_load(b[j], ws + (sg_col + 8 * j) * LD + kk, LD, ulong2(0, 0), true);
    }
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        metal::simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
      }
    }
  }
  metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
}

for (int i = 0; i < 2; ++i) {
  for (int j = 0; j < 2; ++j) {
    metal::simdgroup_store(acc[i][j], xs + (sg_row + 8 * i) * LD + sg_col + 8 * j, LD);
  }
}
metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
for (int e = tid; e < BM * BN; e += THREADS) {
  const int r = e / BN;
  const int c = e % BN;
  const int gr = row0 + r;
  if (gr < rows) {
    y[size_t(gr) * N + col0 + c] = half(xs[r * LD + c]);
  }
}
