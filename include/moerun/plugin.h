/* moerun/plugin.h — the C ABI an out-of-tree backend implements.
 *
 * A plugin is a shared library exporting one symbol:
 *
 *   int moerun_plugin_init(uint32_t host_abi_version, moerun_plugin_v1* out,
 *                          char* err, size_t err_len);
 *
 * The host passes MOERUN_PLUGIN_ABI_VERSION; the plugin fills *out (including the ABI version it was
 * built against) and returns 0, or returns non-zero with a message in err. When host_abi_version is
 * not the version the plugin was built for, the plugin writes out->abi_version alone (the first field,
 * placed alike in every version: the host's *out may be smaller than the plugin's) and returns
 * non-zero. The host refuses a plugin whose out->abi_version differs from its own, whose symbol is
 * missing, or whose init fails or throws, and says which. Everything crosses as C types: the spec and
 * the capabilities as JSON text (the same schema `moerun explain --json` and `moerun backends --json`
 * print), tensors as moerun_tensor. The host refuses more than 64 backends from one plugin.
 *
 * What a plugin may rely on, and what it must do (ABI v1):
 * - Memory: a forward's tensors (hidden, top-k, output) are host tensors, whatever the capabilities'
 *   "device": the host routes every call on the CPU, so a call with device tensors is refused before
 *   it reaches the plugin (a "cuda" plugin copies to its device and returns with the output written,
 *   synchronized). For the same reason "cuda_graph_safe": true is refused at load. A "cpu" plugin's
 *   weights are host tensors; a "cuda" plugin gets the weights where the caller placed them.
 * - Lifetimes: the moerun_weights struct passed to create lives for that call only, but the memory
 *   its tensors point to stays valid until the runner's destroy (keep the pointers, not the struct's
 *   address). spec_json and err live for their call. A runner is destroyed exactly once.
 * - Threads: create may be called from several threads at once (different layers); one runner gets
 *   one forward at a time, never overlapping its destroy.
 * - No callback may throw or longjmp past the ABI: report failures by a non-zero return and a message
 *   in err (at most err_len bytes; the host adds a NUL). The host does catch a C++ exception that gets
 *   out of init, create or forward and reports it as the plugin's failure; one out of destroy is
 *   dropped.
 * - Parallel shards (spec "parallel": tp, ep, rank): the expert-parallel rank is rank % ep (experts
 *   [rank % ep * E / ep, ...) are this shard's, the rest it skips), the tensor-parallel rank is
 *   rank / ep; the weights are this shard's slice (moerun/weights.hpp, shard_weights). The down bias
 *   is added on tensor-parallel rank 0 only, and shared experts on expert-parallel rank 0 only, so that
 *   the shards' outputs sum to the layer's.
 * - Loading: the host dlcloses a library whose init fails or whose backends it refuses (bad
 *   capabilities, a name already registered), so init must leave nothing behind that points into it (no
 *   thread, no callback) until it returns 0 with backends the host accepts; the dynamic loader may keep
 *   such a library mapped (a C++ library with unique symbols), so a later load may run init again in a
 *   process that ran it before, and init may run once per moerun::Registry that loads it. A library
 *   whose backends were registered is never unloaded, and all pointers it returned must stay valid.
 */
#ifndef MOERUN_PLUGIN_H_
#define MOERUN_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOERUN_PLUGIN_ABI_VERSION 1u

/* dtype codes: the order of moerun::DType. */
enum {
  MOERUN_F64 = 0, MOERUN_F32, MOERUN_F16, MOERUN_BF16, MOERUN_F8E4M3, MOERUN_F8E5M2, MOERUN_F8E8M0,
  MOERUN_I64, MOERUN_I32, MOERUN_I16, MOERUN_I8, MOERUN_U8, MOERUN_BOOL
};
/* weight format codes: the order of moerun::WeightFormat. */
enum {
  MOERUN_FMT_F32 = 0, MOERUN_FMT_F16, MOERUN_FMT_BF16, MOERUN_FMT_FP8_PER_TENSOR,
  MOERUN_FMT_FP8_PER_CHANNEL, MOERUN_FMT_FP8_BLOCK, MOERUN_FMT_MXFP4, MOERUN_FMT_NVFP4,
  MOERUN_FMT_INT8_PER_CHANNEL
};

typedef struct moerun_tensor {
  void* data;          /* NULL when absent */
  int32_t dtype;       /* MOERUN_F32, ... */
  int32_t rank;
  int64_t dims[4];
  int32_t device;      /* 0 = cpu, 1 = cuda */
  int32_t device_index;
} moerun_tensor;

typedef struct moerun_expert_matrix {
  int32_t format;      /* MOERUN_FMT_* */
  int64_t experts, rows, cols;
  moerun_tensor data, scale, global_scale;
} moerun_expert_matrix;

typedef struct moerun_weights {
  moerun_expert_matrix w13, w2, shared_w13, shared_w2;
  moerun_tensor w13_bias, w2_bias, router_weight, router_bias, correction_bias, shared_gate;
} moerun_weights;

/* The host always routes for a plugin: topk_ids [M, k] int32 and topk_weights [M, k] f32 are given.
 * output [M, H] must be fully written (it may hold NaN on entry). */
typedef struct moerun_forward_args {
  moerun_tensor hidden, topk_ids, topk_weights, output;
  moerun_tensor reserved;  /* ABI v1: always absent (LoRA weights do not cross the v1 ABI) */
  void* stream;
} moerun_forward_args;

typedef struct moerun_backend_v1 {
  const char* name;
  const char* description;
  /* The capabilities record as JSON: the keys of moerun::Capabilities in snake_case, e.g.
   * {"device":"cpu","formats":[{"weights":"bf16","act_quant":"none"}],"act_dtypes":["bf16","f32"],
   *  "activations":["silu-and-mul"],"scorings":["softmax","sigmoid"], ...}. Unknown keys are errors. */
  const char* capabilities_json;
  /* Returns 0 and sets *runner, or non-zero with a message in err. */
  int (*create)(const char* spec_json, const moerun_weights* weights, int32_t threads, void** runner,
                char* err, size_t err_len);
  int (*forward)(void* runner, const moerun_forward_args* args, char* err, size_t err_len);
  void (*destroy)(void* runner);
} moerun_backend_v1;

typedef struct moerun_plugin_v1 {
  uint32_t abi_version;     /* set to MOERUN_PLUGIN_ABI_VERSION as the plugin saw it */
  uint32_t num_backends;
  const moerun_backend_v1* backends;
} moerun_plugin_v1;

typedef int (*moerun_plugin_init_fn)(uint32_t host_abi_version, moerun_plugin_v1* out, char* err,
                                     size_t err_len);

#define MOERUN_PLUGIN_ENTRY "moerun_plugin_init"

#ifdef __cplusplus
}
#endif

#endif /* MOERUN_PLUGIN_H_ */
