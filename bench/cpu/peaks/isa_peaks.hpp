// bench/cpu/peaks/isa_peaks.hpp — compute peaks of ISA levels the portable bench code must not be compiled
// for: the AVX-512 fp32 FMA peak and the AMX bf16 tile peak (tdpbf16ps). isa_peaks.cpp is compiled with
// -mavx512f -mamx-tile -mamx-bf16, so call these only after the CPU and the OS were found to allow them
// (moerun::cpu::detected_features(); for AMX that call also requested the tile data permission).
#pragma once

namespace moerun_bench {

// fp32 GFLOP/s of `threads` threads each running independent 512-bit FMA chains (no memory traffic).
double avx512_fma_peak_gflops(int threads);

struct AmxPeak {
  double gflops = 0;       // best of the kernels below, bf16 products accumulated in fp32
  double gflops_2x2 = 0;   // 4 accumulators C0..C3 fed by A0,A1 x B0,B1 (the shape of a GEMM micro-kernel)
  double gflops_1x6 = 0;   // 6 accumulators fed by one A and one B tile (more independent chains)
};
// Each of `threads` threads loops tdpbf16ps on register-resident tiles for about `seconds` per kernel;
// FLOPs = 2*16*16*32 per tdpbf16ps.
AmxPeak amx_bf16_peak(int threads, double seconds);

}  // namespace moerun_bench
