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
 * print), tensors as moerun_tensor; a plugin whose capabilities say "device": "cpu" is given host
 * tensors only. A library is unloaded when its init fails or what init returned is refused (bad
 * capabilities, a name already registered), so init must leave nothing behind that points into it
 * (no thread, no callback) until it returns 0 with backends the host accepts; a library whose
 * backends were registered is never unloaded, and all pointers it returned must stay valid.
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
