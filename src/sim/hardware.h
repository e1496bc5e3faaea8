// What a machine can do, for the cost model (issue: predict before you run): one node's devices,
// their memory and peak rates, the host, and the links between ranks by class, each an
// alpha-beta model (a message of n bytes takes latency + n / bandwidth; Hockney, as
// patrickstar-v1 sec. 6.2 models collectives). Read from configs/hardware/*.toml, written by
// `tidal calibrate` for the machine it runs on.
//
// The file (bandwidths in GB/s per direction as one rank sees them, latencies in microseconds,
// memory in GiB, rates in TFLOP/s):
//   name = "8 x H100 SXM"
//   devices_per_node = 8
//   [device]  kind = "cuda", memory_gib, memory_gbps, [device.tflops] fp32, bf16, fp16,
//             bf16_native (cpu only: whether GEMMs and attention take bf16 as it is; false, they
//             widen operands to fp32 copies, workspace the cost model counts; cuda: always),
//             optional op rates (tidal calibrate measures them; a data sheet has none):
//             [device.gemm_sizes] fp32 / bf16 / fp16 = [[n, TFLOP/s], ...] of n x n x n products
//             below the peak's size; [device.attention_tflops] fp32, bf16, fp16 (attention's
//             forward and backward; default half the GEMM peak); [device.attention_sizes] fp32 /
//             bf16 / fp16 = [[keys, TFLOP/s], ...] below it; elementwise_gbps (the bytes
//             elementwise ops make, written and read, per second, on tensors of 2^21 elements: a
//             number for every dtype or { fp32, bf16, fp16 }; default memory_gbps);
//             [device.elementwise_sizes] fp32 / bf16 / fp16 = [[elements, GB/s], ...] of smaller
//             tensors (a cache holds them);
//             optimizer_gbps (AdamW's 28 bytes a parameter per second; default memory_gbps),
//             oversubscription (cpu: the node's ranks' threads per core where they share too few
//             cores, mpirun --oversubscribe; default 1: the rates above are each rank's with every
//             rank computing at once, and a rank computing while others wait runs faster, up to
//             this many times)
//   [host]    memory_gib (per node), device_gbps (host <-> device), optimizer_gbps (AdamW's 28
//             bytes a parameter per second on the host's cores, one rank's share: memory.offload's
//             optimizer states there; a cpu device's default is its own optimizer_gbps, a cuda
//             device has none, and a layout with offload then has no time)
//   [disk]    (optional) write = { gbps, latency_us, bytes, sizes }: a checkpoint's save as the
//             node's disk takes it, every rank of the node writing a file of its own at once,
//             fsynced, and one rank then committing (metadata, renames, fsyncs): a "message" is the
//             node's bytes, its latency the save's fixed cost, sizes the bandwidth of smaller saves
//             (a disk's or a VM's write cache takes a burst faster). Without it a save has no time.
//   [links]   intra_node_pair, intra_node_collective, inter_node (optional): { gbps, latency_us },
//             optionally with bytes (a message's bytes through the link that gbps was measured on)
//             and sizes = [[bytes, gbps], ...] of smaller messages (tidal calibrate measures them);
//             a send takes the pair link, a collective (two ranks too) the collective link;
//             pairs = "any" (default: every two ranks of a node have the pair link, NVSwitch) or
//             "adjacent" (only ranks 2k and 2k + 1 do, colossal-ai.txt's System II: there a
//             collective of such a pair takes their own link)
#pragma once

#include "core/device.h"
#include "core/dtype.h"

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tidal::sim {

struct Link {
  double bandwidth = 0;  // bytes/s, on messages of `measured_at` bytes and more
  double latency = 0;    // s
  // Smaller messages: (bytes a message moves through the link, bytes/s), ascending; empty: the
  // bandwidth above for every size. On a CPU, MPI's copies of a small message stay in cache (measured
  // here, an all-reduce over 4 ranks: 2.1-2.6 GB/s at 0.5-2 MiB, 0.74 at 64 MiB).
  std::vector<std::pair<double, double>> sizes = {};
  double measured_at = 0;  // bytes a message of `bandwidth` moves (0: the largest size's twice)
  // The bandwidth of messages of `bytes` each: the sizes' curve, `bandwidth` beyond it.
  double bandwidth_at(double bytes) const;
  double seconds(double bytes) const { return latency + bytes / bandwidth_at(bytes); }
};

struct Hardware {
  std::string name;
  std::string source;  // what the figures are: measured where and when, or a data sheet
  Device::Kind device = Device::Kind::cpu;
  int devices_per_node = 1;
  double device_memory = 0;      // bytes per device
  double memory_bandwidth = 0;   // bytes/s of a device's memory
  std::map<DType, double> flops;  // peak FLOP/s of a device's GEMMs per dtype (f32, bf16, f16)
  bool bf16_native = true;        // bf16 operands as they are (else widened to fp32 copies)
  // Square GEMMs below the peak's size: (n, FLOP/s) by dtype, ascending n; empty: the peak always.
  std::map<DType, std::vector<std::pair<double, double>>> gemm_sizes;
  std::map<DType, double> attention_flops;  // attention's forward and backward, FLOP/s
  // Attention over fewer keys than the rate above was measured on: (keys, FLOP/s) by dtype,
  // ascending; empty: that rate always.
  std::map<DType, std::vector<std::pair<double, double>>> attention_sizes;
  // Elementwise ops' bytes made, written and read, per second by dtype, on tensors of
  // kElementwiseElements elements; and on fewer: (elements, bytes/s) by dtype, ascending.
  static constexpr double kElementwiseElements = double(1 << 21);
  std::map<DType, double> elementwise_bandwidth;
  std::map<DType, std::vector<std::pair<double, double>>> elementwise_sizes;
  double optimizer_bandwidth = 0;           // bytes/s of AdamW's traffic (0: memory_bandwidth)
  // The node's ranks' threads per core, where they share too few cores (1: a core per thread).
  // The rates above are what each rank sees while every rank of the node computes; with fewer
  // computing (the others waiting, their cores given up), each runs faster.
  double oversubscription = 1;
  // How much faster than those rates a rank computes while `computing` of the node's `ranks`
  // ranks do (processor sharing: the busy ranks share the cores, up to a thread per core).
  double sharing_speedup(double computing, double ranks) const;
  // The rate of an m x n x k GEMM: the sizes' curve at the cube of the same work, the peak beyond it.
  double gemm_rate(DType dtype, double m, double n, double k) const;
  // The rate of attention whose queries each see up to `keys` keys: the sizes' curve, the
  // attention rate beyond it.
  double attention_rate(DType dtype, double keys) const;
  // The bytes/s of elementwise ops making `dtype` tensors of `elements`: the sizes' curve, the
  // rate of kElementwiseElements beyond it.
  double elementwise_rate(DType dtype, double elements) const;
  // The best GEMM rate the file gives for `dtype` (the peak, or a faster measured size): MFU's measure.
  double peak_flops(DType dtype) const;
  double host_memory = 0;         // bytes per node
  double host_device_bandwidth = 0;  // bytes/s between host and device
  double host_optimizer_bandwidth = 0;  // bytes/s of AdamW's traffic on the host (0: not known)
  // A checkpoint's save on a node (see [disk] above): the node's bytes through its disk.
  std::optional<Link> disk_write;
  Link intra_node_pair;        // a send between two ranks of a node (a pipeline's activations)
  bool adjacent_pairs = false;  // only ranks 2k and 2k + 1 of a node have the pair link
  Link intra_node_collective;  // a collective over ranks of a node, two or more (ring all-reduce bus bandwidth)
  std::optional<Link> inter_node;  // between nodes; absent: a single node
};

// Reads a hardware file; a missing or bad key is an error naming the file and the key.
Hardware load_hardware(const std::string& path);
// The file load_hardware reads back (the same figures).
std::string hardware_toml(const Hardware& h);

}  // namespace tidal::sim
