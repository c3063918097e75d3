// bench/cpu/peaks/isa_peaks.hpp — compute peaks of ISA levels the portable bench code must not be compiled
// for: the AVX-512 fp32 FMA peak and the AMX bf16 tile peak (tdpbf16ps). isa_peaks.cpp is compiled with
// -mavx512f -mavx512bw -mavx512vnni -mavx512bf16 -mamx-tile -mamx-bf16, so call these only after the CPU and the OS were found to allow them
// (moerun::cpu::detected_features(); for AMX that call also requested the tile data permission).
#pragma once

#include <string>
#include <vector>

namespace moerun_bench {

// fp32 GFLOP/s of `threads` threads each running independent 512-bit FMA chains (no memory traffic).
double avx512_fma_peak_gflops(int threads);
// The same for VDPBF16PS (bf16 pairs multiplied, fp32 accumulation: 64 FLOPs an instruction); needs
// AVX512-BF16.
double avx512_bf16_dot_peak_gflops(int threads);
// The same for VPDPBUSD (64 unsigned x signed byte products accumulated into int32: 128 operations an
// instruction), the q8 / q15 kernels' instruction at the AVX-512 VNNI level; needs AVX512-VNNI.
double avx512_vnni_dot_peak_gops(int threads);

struct AmxPeak {
  double gflops = 0;       // best of the two register-resident kernels below, bf16 products accumulated in fp32
  double gflops_2x2 = 0;   // 4 accumulators C0..C3 fed by A0,A1 x B0,B1 (the shape of a GEMM micro-kernel)
  double gflops_1x6 = 0;   // 6 accumulators fed by one A and one B tile (more independent chains)
  // Not peaks, diagnostics of the tile kernels (not used in any floor), timed in alternating slices so that
  // they compare with each other (the host's tile throughput moves within seconds):
  double gflops_2x2_alternated = 0;  // the 2x2 kernel, register-resident tiles
  double gflops_2x2_l1 = 0;  // the 2x2 kernel reloading its four operand tiles from L1 before every step
                             // (kernels::tile_amx2's inner loop with every operand in L1), A and B tiles
                             // 1 KiB contiguous each
  double gflops_2x2_l1_strided = 0;  // the same with the A tiles' rows 4160 bytes apart, as tile_amx2 reads
                                     // the activation rows (K = 2048 bf16 plus the runner's 32-element pad)
  double tileload_gbs = 0;   // tileloadd alone, 16 rows x 64 bytes from L1, bytes per second / 1e9
};
// Each of `threads` threads loops tdpbf16ps on register-resident tiles (and the two diagnostics) for about
// `seconds` per kernel; FLOPs = 2*16*16*32 per tdpbf16ps.
AmxPeak amx_bf16_peak(int threads, double seconds);

// Where the operand tiles of tile_amx2's 2x2 step come from, and what that costs: the step (two A tiles of
// token rows 4160 bytes apart, two 1 KiB B tiles of two weight panels, four tdpbf16ps, no C traffic) with
// each operand either re-read from a few L1-resident KiB, walked through L2-sized buffers the way one pass
// over K = 2048 walks them (A 133 KiB, B 128 KiB), or (B) walked through memory with tile_amx2's 4 KiB
// prefetch; plus the A-in-L1 / B-in-L2 step with its four C tiles stored and reloaded every 8 steps (a
// K-chunked kernel's cost). Then three whole designs for 64 tokens per expert with the weights streamed
// from memory (64 FLOPs a weight byte): tile_amx2's two passes of 32 tokens (the second reads B from L2),
// one panel times four A tiles (tiles_t<4>: B read once, four A loads a step), and the two 32-token groups
// alternating per 8-step K chunk with their C tiles stored and reloaded (B read once, from L1 the second
// time). Timed in alternating slices on `threads` threads; GFLOP/s over all threads.
struct AmxPlacement {
  std::string name;
  double gflops = 0;
};
// Its threads end with their tiles released behind the backend's back (kernels::amx_release's per-thread
// record still says configured): the caller runs no moerun AMX kernel afterwards (cpu_kernel_bench
// exits). Returns nothing when a thread's 256 MiB cannot be allocated.
std::vector<AmxPlacement> amx_operand_placement(int threads, double seconds);

}  // namespace moerun_bench
