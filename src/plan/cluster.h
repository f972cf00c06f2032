// ClusterSpec: the planner's description of the machines a job runs on, read from YAML (see
// DESIGN.md, "Cluster spec"). Presets ship in configs/clusters/ and resolve by bare name
// ("1024_ascend910b"); any other argument is a path to a YAML file with the same keys.
//
// Besides the keys of DESIGN.md, a spec may carry the few device and fabric facts the cost
// model needs to turn FLOPs and bytes into seconds (every one has a documented default):
//   device.compute_units        SMs / AI cores: GEMM tiles run in waves of this many
//   device.gemm_efficiency      best measured fraction of peak on large GEMMs ("MAMF")
//   device.memory_efficiency    fraction of HBM bandwidth streaming kernels reach
//   device.elementwise_GBps     the elementwise kernels' rate over the bytes counted for them
//                               (0: memory bandwidth x memory_efficiency; measured on CPUs)
//   intra_node.topology         switch (NVSwitch: every device has bandwidth_GBps to the
//                               switch) or full_mesh (HCCS: bandwidth_GBps per peer link)
//   intra_node/inter_node.efficiency   achieved fraction of link bandwidth in collectives
//   reliability.device_mtbf_hours, checkpoint_write_GBps_per_node, restart_s
//   allow_cross_node_tp         whether tensor parallelism may span nodes (default no)
//   collective_launch_us        a collective's fixed launch cost in the library (default 0)
//   device.precision            bf16 (default: mixed precision as Megatron-LM trains), fp8
//                               (DeepSeek-V3's recipe, below) or fp32 (cann-train's own
//                               engine: plain fp32, see engine_memory.h)
//   device.fp8_peak_tflops      dense fp8 matrix peak (0: the device has no fp8 units)
//   device.bf16_gemm_tflops     fp32 devices (the CPU engine): the linear layers' GEMM rate
//                               with bf16 inputs and fp32 accumulation (`run --precision
//                               bf16`), measured by `bench calibrate`; 0: not measured
//   device.runtime_reserve_GB   memory the runtime keeps beside the training state (default:
//                               2 on bf16/fp8 devices, 0 on fp32 ones; measured by calibration)
//   device.fused_attention_tflops   measured forward+backward TFLOP/s of fused attention kernels,
//                               {kernel: {sequence: TFLOP/s, ...}, ...}
//   device.fused_attention_kernel   the one of them the device's frameworks run by default
//   device.attention            fused (FlashAttention: no s x s tensor kept, recomputed in
//                               backward; the default for bf16 devices) or materialized (the
//                               scores and probabilities in memory, as Megatron-LM ran before
//                               fused kernels and as cann-train's CPU engine does; the default
//                               for fp32 devices)
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace cann::plan {

// How a device trains, which fixes the bytes of every tensor the planner counts:
//  kBf16: mixed precision (Micikevicius et al. 2018): bf16 weights, gradients and activations,
//         fp32 master weights and Adam moments, dropout masks; what GPU and NPU clusters run.
//  kFp32: cann-train's CPU engine: fp32 parameters, gradients, AdamW moments and activations,
//         no master copy, no dropout; memory is the engine's own allocation (engine_memory.h).
//  kFp8:  DeepSeek-V3's FP8 mixed precision (DeepSeek-AI 2024, section 3.3): the linear
//         layers' GEMMs in fp8 at the fp8 peak, their inputs cached for backward in fp8 (the
//         attention output in a 12-bit format), tokens dispatched to experts in fp8; attention,
//         norms, the router, embedding and head in bf16; fp32 master weights and gradients,
//         AdamW moments in bf16.
enum class Precision { kBf16, kFp32, kFp8 };

std::string_view precision_name(Precision p);
StatusOr<Precision> parse_precision(std::string_view name);
// Bytes of one activation, gradient or weight element on the wire and in memory: 2 or 4.
inline double element_bytes(Precision p) {
  return p == Precision::kFp32 ? 4.0 : 2.0;
}

// How attention is computed (layer_cost.h prices both).
enum class AttentionKernel { kFused, kMaterialized };
std::string_view attention_kernel_name(AttentionKernel a);
StatusOr<AttentionKernel> parse_attention_kernel(std::string_view name);

// Measured forward-plus-backward speed of one fused attention kernel on a device (causal, head
// dimension 128): TFLOP/s by sequence length, lengths increasing.
struct AttentionSpeed {
  std::string kernel;  // e.g. "flash2" (FlashAttention-2), "cudnn" (cuDNN's fused attention)
  std::vector<std::pair<double, double>> tflops_at_seq;
};

struct DeviceSpec {
  std::string name;
  double peak_tflops = 0;      // dense bf16/fp16 matrix peak
  double fp8_peak_tflops = 0;  // dense fp8 matrix peak; 0: no fp8 units
  // fp32 devices: the GEMM rate of bf16 inputs with fp32 accumulation (0: not measured), and
  // whether the planned run uses it (`--precision bf16` on the CPU engine: weights, gradients,
  // optimizer state and activations stay fp32, so only the linear layers' time changes).
  double bf16_gemm_tflops = 0;
  bool bf16_gemms = false;
  // The peak MFU divides by: the bf16 GEMM rate when the planned run multiplies in bf16 (the
  // precision's own ceiling, as an fp32 peak would let MFU pass 1), else peak_tflops.
  double mfu_peak_tflops() const { return bf16_gemms ? bf16_gemm_tflops : peak_tflops; }
  double memory_gb = 0;  // HBM capacity, binary GB (2^30 bytes)
  double memory_bandwidth_GBps = 0;
  double tdp_watts = 0;
  double hourly_cost_usd = 0;
  int compute_units = 0;          // 0: wave quantization not modelled
  double gemm_efficiency = 0.80;  // see cluster.cc for the default's source
  // The GEMM library's output tile, rows = columns (tile quantization, gemm_model.h): 128, the
  // CUTLASS/cuBLAS bf16 tile, on GPUs and NPUs; 0 where whole tiles are not what a GEMM pays
  // for (a CPU BLAS blocks a few rows in registers; `bench calibrate` writes 0 and measures
  // thin shapes instead, below).
  double gemm_tile = 128;
  // Measured fraction of peak_tflops a GEMM reaches by its smallest dimension, (dimension,
  // fraction) with dimensions increasing, for fp32 GEMMs and for bf16-input GEMMs (of
  // bf16_gemm_tflops); `bench calibrate` measures both on CPUs. Empty: not measured, 1.
  std::vector<std::pair<double, double>> gemm_efficiency_by_min_dim;
  std::vector<std::pair<double, double>> bf16_gemm_efficiency_by_min_dim;
  double memory_efficiency = 0.90;
  // The rate, GB/s, at which the device's elementwise kernels (norms, activations, softmax,
  // residual adds) move the bytes the planner counts for them; 0: memory_bandwidth_GBps x
  // memory_efficiency, as on a GPU, where they stream from HBM. A CPU runs them on activations
  // that sit in its caches, bound by their arithmetic (tanh, exp, rsqrt) rather than by memory;
  // `bench calibrate` times the engine's own kernels.
  double elementwise_GBps = 0;
  // Resident memory the runtime holds on every device beside the training state (framework
  // context, libraries, communicator buffers, allocator slack), binary GB; < 0: the default of
  // the precision (predict.h, reserved_bytes). `bench calibrate` measures it for CPU workers.
  double runtime_reserve_gb = -1;
  // The engine's buffers of 4 MiB and more are mapped on 2 MiB boundaries with huge pages
  // advised (core/aligned_buffer.h); where transparent huge pages honour that advice, each is
  // resident in whole 2 MiB pages. `bench calibrate` reads it from the kernel (fp32 devices).
  bool huge_pages = false;
  // Compute slowed by a collective running beside it: the seconds added per second of compute
  // that overlaps one (communication kernels take SMs, memory bandwidth and caches from the
  // GEMMs); < 0: the precision's default (predict.h, overlap_slowdown).
  double overlap_slowdown = -1;
  Precision precision = Precision::kBf16;
  AttentionKernel attention = AttentionKernel::kFused;  // see the file comment for the default
  // Fused kernels measured on this device (device.fused_attention_tflops) and the one a fused
  // core runs (device.fused_attention_kernel, or one named by `--attention`; empty: none
  // measured, see fused_attention_tflops).
  std::vector<AttentionSpeed> fused_attention;
  std::string fused_kernel;

  double memory_bytes() const { return memory_gb * 1073741824.0; }
};

enum class IntraTopology { kSwitch, kFullMesh };

struct LinkSpec {
  double bandwidth_GBps = 0;  // per device (switch) or per peer link (full mesh), one direction
  double latency_us = 0;
  double efficiency = 0.80;
  std::string interconnect;
  IntraTopology topology = IntraTopology::kSwitch;  // intra_node only
};

struct Reliability {
  // Device-hours between job-interrupting failures, per device. Default: Llama 3 (Dubey et al.
  // 2024, section 3.3.4): 419 unexpected interruptions in 54 days on 16,384 H100 GPUs, so
  // 16384 * 54 * 24 / 419 = 50,677 device-hours.
  double device_mtbf_hours = 50677;
  // Checkpoint write (and read) bandwidth a node gets from shared storage. Default: Llama 3's
  // Tectonic storage sustained 2 TB/s for 2,048 nodes (Dubey et al. 2024, section 3.3.1), about
  // 1 GB/s per node.
  double checkpoint_write_GBps_per_node = 1.0;
  // Seconds from a failure to training again, not counting the checkpoint load: detection,
  // rescheduling, process start and communicator setup. An assumption (10 minutes); set it from
  // your own incident logs.
  double restart_s = 600;
};

struct ClusterSpec {
  std::string name;
  std::string source;  // where it was read from, for error messages
  int nodes = 0;
  int devices_per_node = 0;
  DeviceSpec device;
  LinkSpec intra_node;
  LinkSpec inter_node;
  Reliability reliability;
  bool allow_cross_node_tp = false;
  // Fixed cost of launching one collective in the communication library, before its steps
  // (comm_model.h). NVIDIA presets: NCCL's 8.4 us; 0 where unmeasured or already inside a
  // calibrated latency_us.
  double collective_launch_us = 0;
  // A calibrated spec kept with `bench calibrate --accept-busy` while the machine was busy:
  // what was seen. Empty for presets, quiet calibrations and specs written before the mark.
  std::string measured_under_load;

  int num_devices() const { return nodes * devices_per_node; }
};

// fp8 needs a device with an fp8 peak.
Status check_precision(const ClusterSpec& c);
// "fused" (the device's default fused kernel), "materialized", or the name of a fused kernel
// the device has measured (a fused core run by that kernel); `where` starts the error.
Status select_attention(DeviceSpec* d, std::string_view name, const std::string& where);
// TFLOP/s of the device's fused kernel on sequences of `seq` queries: piecewise linear in
// log2(seq) between the measured lengths, held at the nearest one outside them; 0 when the
// device has no measured kernel.
double fused_attention_tflops(const DeviceSpec& d, double seq);
// Parses YAML text; `source` names the file in every error message.
StatusOr<ClusterSpec> parse_cluster_spec(const std::string& text, const std::string& source);
// A path to a YAML file, a spec written by `cann-train bench calibrate` (looked up by name in
// calibrated_cluster_dir(), "local" by default), or a preset name from configs/clusters/.
StatusOr<ClusterSpec> load_cluster_spec(const std::string& name_or_path);
// Where calibrated specs live: $CANN_TRAIN_HOME/clusters (default ~/.cann-train/clusters).
std::string calibrated_cluster_dir();
// Names of the shipped presets.
std::vector<std::string> shipped_cluster_names();

}  // namespace cann::plan
