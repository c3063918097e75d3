// throwaway: perK vs VNNI f32 panel decode, alternating, one block repeatedly (L1/L2) and many blocks (memory)
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>
#include <algorithm>
#include "backends/cpu/prepack.hpp"
#include "backends/cpu/kernels/kernels.hpp"
#include "moerun/formats.hpp"
#include "moerun/tensor.hpp"
using namespace moerun; using namespace moerun::cpu;
double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
int main(){
  for (WeightFormat f : {WeightFormat::kMxfp4, WeightFormat::kNvfp4}) {
    const int64_t E=1,N=64,K=2048;
    std::vector<float> w(E*N*K); std::mt19937 g(1); std::normal_distribution<float> nd(0,1); for(auto& v:w) v=nd(g);
    ExpertMatrix m = quantize_experts(f, w.data(), E, N, K);
    auto a=pack_stack(m,LaneMap::kPlain,kernels::CodeLayout::kPerK);
    auto b=pack_stack(m,LaneMap::kPlain,kernels::CodeLayout::kVnniWords);
    std::vector<float> buf(K*16+16); float* p=(float*)(((uintptr_t)buf.data()+63)&~uintptr_t(63));
    std::vector<double> ta,tb;
    for(int r=0;r<21;++r){
      double t0=now(); for(int it=0;it<200;++it) for(int64_t bl=0;bl<a->nblocks;++bl) kernels::dequant_panel_avx2(a->block(0,bl),p); ta.push_back(now()-t0);
      t0=now(); for(int it=0;it<200;++it) for(int64_t bl=0;bl<b->nblocks;++bl) kernels::dequant_panel_avx2_vnni(b->block(0,bl),p); tb.push_back(now()-t0);
    }
    std::sort(ta.begin(),ta.end()); std::sort(tb.begin(),tb.end());
    double pairs=200.0*a->nblocks*K/2;
    std::printf("%s perK %.2f ns/pair  vnni %.2f ns/pair  ratio %.2f\n", f==WeightFormat::kMxfp4?"mxfp4":"nvfp4", ta[10]/pairs*1e9, tb[10]/pairs*1e9, tb[10]/ta[10]);
  }
}
