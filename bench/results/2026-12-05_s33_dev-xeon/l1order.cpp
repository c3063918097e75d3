// Probe (session 33): one thread, 2x2 AMX tile loop over K = 32 x KB with A (32 rows, row stride KB*64 + PAD bytes) and two B panels; KB = 4 all in L1, KB = 64 in L2. Variants: 0 library order, 1 A loads first, 2 no loads (peak), 3 B loads only (A tiles kept), 4 other order, 5 library order + 16 redundant T0 prefetches per panel and step, 6 A from a 4-step window (L1) with B over KB, 7 A over KB with B from a 4-step window, 8 7 with the C tiles stored and reloaded every 8 steps (same buffer), 9 the same but reloaded from another buffer (as a K-chunked kernel switching row passes does). ./l1order KB PAD
// g++ -O2 -mamx-tile -mamx-bf16 -mavx512f l1order.cpp -o l1order
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
struct Cfg { uint8_t palette, start; uint8_t r[14]; uint16_t colsb[16]; uint8_t rows[16]; };
static void cfg() { Cfg c; memset(&c,0,sizeof c); c.palette=1; for(int t=0;t<8;++t){c.colsb[t]=64;c.rows[t]=16;} _tile_loadconfig(&c); }
int main(int argc,char**argv){
  syscall(SYS_arch_prctl, 0x1023, 18);
  cfg();
  int KB = argc>1? atoi(argv[1]) : 4;
  const int steps = KB;
  uint16_t* A = (uint16_t*)aligned_alloc(64, 32*(steps*64+256));
  uint16_t* B0 = (uint16_t*)aligned_alloc(64, steps*1024);
  uint16_t* B1 = (uint16_t*)aligned_alloc(64, steps*1024);
  memset(A,0,32*(steps*64+256)); memset(B0,0,steps*1024); memset(B1,0,steps*1024);
  alignas(64) static float spill[4096];
  size_t stride = steps*64 + (argc>2? atoi(argv[2]):0);
  const long iters = 4000000 / steps;
  for (int variant=0; variant<10; ++variant) {
    double best=1e9;
    for (int rep=0;rep<5;++rep){
    auto t0=std::chrono::steady_clock::now();
    _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
    for (long it=0; it<iters; ++it){
      for (int k=0;k<steps;++k){
        const uint16_t* a = A + k*32; const uint16_t* b0 = B0 + k*512; const uint16_t* b1 = B1 + k*512;
        if (variant==0){
          _tile_loadd(6,b0,64); _tile_loadd(7,b1,64); _tile_loadd(4,a,stride);
          _tile_dpbf16ps(0,4,6); _tile_dpbf16ps(1,4,7);
          _tile_loadd(5,a+16*(stride/2),stride); _tile_dpbf16ps(2,5,6); _tile_dpbf16ps(3,5,7);
        } else if (variant==1){
          _tile_loadd(4,a,stride); _tile_loadd(6,b0,64);  _tile_dpbf16ps(0,4,6);
          _tile_loadd(7,b1,64); _tile_dpbf16ps(1,4,7);
          _tile_loadd(5,a+16*(stride/2),stride); _tile_dpbf16ps(2,5,6); _tile_dpbf16ps(3,5,7);
        } else if (variant==6){  // A from a 4-step window (L1), B over all KB (L2)
          const uint16_t* a1 = A + (k & 3) * 32;
          _tile_loadd(6,b0,64); _tile_loadd(7,b1,64); _tile_loadd(4,a1,stride);
          _tile_dpbf16ps(0,4,6); _tile_dpbf16ps(1,4,7);
          _tile_loadd(5,a1+16*(stride/2),stride); _tile_dpbf16ps(2,5,6); _tile_dpbf16ps(3,5,7);
        } else if (variant==7){  // A over all KB (L2), B from a 4-step window (L1)
          const uint16_t* c0 = B0 + (k & 3) * 512; const uint16_t* c1 = B1 + (k & 3) * 512;
          _tile_loadd(6,c0,64); _tile_loadd(7,c1,64); _tile_loadd(4,a,stride);
          _tile_dpbf16ps(0,4,6); _tile_dpbf16ps(1,4,7);
          _tile_loadd(5,a+16*(stride/2),stride); _tile_dpbf16ps(2,5,6); _tile_dpbf16ps(3,5,7);
        } else if (variant==8 || variant==9){  // 7 + C spilled and reloaded every 8 (9: 16) steps
          const uint16_t* c0 = B0 + (k & 3) * 512; const uint16_t* c1 = B1 + (k & 3) * 512;
          _tile_loadd(6,c0,64); _tile_loadd(7,c1,64); _tile_loadd(4,a,stride);
          _tile_dpbf16ps(0,4,6); _tile_dpbf16ps(1,4,7);
          _tile_loadd(5,a+16*(stride/2),stride); _tile_dpbf16ps(2,5,6); _tile_dpbf16ps(3,5,7);
          if ((k & 7) == 7) {
            float* st = spill + ((k >> 3) & 3) * 1024;
            float* ld = variant == 8 ? st : spill + (((k >> 3) + 1) & 3) * 1024;
            _tile_stored(0, st, 64); _tile_stored(1, st + 256, 64); _tile_stored(2, st + 512, 64); _tile_stored(3, st + 768, 64);
            _tile_loadd(0, ld, 64); _tile_loadd(1, ld + 256, 64); _tile_loadd(2, ld + 512, 64); _tile_loadd(3, ld + 768, 64);
          }
        } else if (variant==5){
          for (int l=0;l<1024;l+=64){ _mm_prefetch((const char*)b0+1024*8+l,_MM_HINT_T0); _mm_prefetch((const char*)b1+1024*8+l,_MM_HINT_T0);}
          _tile_loadd(6,b0,64); _tile_loadd(7,b1,64); _tile_loadd(4,a,stride);
          _tile_dpbf16ps(0,4,6); _tile_dpbf16ps(1,4,7);
          _tile_loadd(5,a+16*(stride/2),stride); _tile_dpbf16ps(2,5,6); _tile_dpbf16ps(3,5,7);
        } else if (variant==2){
          _tile_dpbf16ps(0,4,6); _tile_dpbf16ps(1,4,7); _tile_dpbf16ps(2,5,6); _tile_dpbf16ps(3,5,7);
        } else if (variant==3){
          _tile_loadd(6,b0,64); _tile_loadd(7,b1,64);
          _tile_dpbf16ps(0,4,6); _tile_dpbf16ps(1,4,7); _tile_dpbf16ps(2,5,6); _tile_dpbf16ps(3,5,7);
        } else {
          _tile_loadd(6,b0,64); _tile_loadd(4,a,stride); _tile_dpbf16ps(0,4,6);
          _tile_loadd(5,a+16*(stride/2),stride); _tile_dpbf16ps(2,5,6);
          _tile_loadd(7,b1,64); _tile_dpbf16ps(1,4,7); _tile_dpbf16ps(3,5,7);
        }
      }
    }
    alignas(64) float o[256]; _tile_stored(0,o,64);
    double s=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
    if(s<best)best=s;
    }
    double flops = 4.0*16384*steps*iters;
    printf("KB=%d variant %d: %.2f TFLOP/s\n", KB, variant, flops/best/1e12);
  }
}
