// cpu/kernels/amx_tile_config.hpp — the AMX tile configuration (palette 1) and the way to load it.
#pragma once

#include <cstdint>

namespace moerun::cpu::kernels {

// LDTILECFG's 64-byte operand: palette 1, then per tile its bytes per row and its rows (tiles 0-7; the
// rest must stay zero).
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// LDTILECFG of all 64 bytes of c. Not _tile_loadconfig: GCC 12's intrinsic declares its operand as
// "m" (*(const void **) p), 8 bytes, so the compiler may drop the stores to the rest of the
// configuration as dead. It did in gemm_amx.cpp's wide-stream configuration (GCC 12.2, -O3): the tiles'
// rows and widths were never written, the configuration loaded as all-empty tiles, and the next
// tilezero raised SIGILL (every mxfp4 / nvfp4 / fp8 layer with 17-64 tokens per expert at the AMX
// level). With the whole struct as the operand every byte is an input of the instruction.
inline void load_tile_config(const TileConfig& c) { asm volatile("ldtilecfg %0" : : "m"(c)); }

}  // namespace moerun::cpu::kernels
