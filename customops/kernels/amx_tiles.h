// The AMX tile configuration every AMX kernel uses (i2s/mul/amx.cc, attention/amxbf16.cc): eight
// 16 x 64-byte tiles. Include only from a file compiled with -mamx-tile. Loaded on every kernel call:
// another AMX kernel on this thread may have loaded or released its own configuration in between.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace bitnet_onnx {

struct alignas(64) AmxTileConfig {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
};

inline void load_amx_tile_config() {
  AmxTileConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

}  // namespace bitnet_onnx
