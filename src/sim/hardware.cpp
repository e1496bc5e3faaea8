#include "sim/hardware.h"

#include "core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <tuple>

namespace tidal::sim {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0, kGB = 1e9, kTera = 1e12, kMicro = 1e-6;

// The keys of one file, each read with its unit and its place named in errors.
class Reader {
 public:
  Reader(const toml::table& t, std::string file) : t_(t), file_(std::move(file)) {}

  double positive(const std::string& key, const char* what) const {
    const toml::node* n = t_.at_path(key).node();
    TIDAL_CHECK(n, "{}: '{}' is missing ({})", file_, key, what);
    const std::optional<double> v = n->is_integer() ? std::optional<double>(double(*n->value<std::int64_t>()))
                                                    : n->value<double>();
    TIDAL_CHECK(v && std::isfinite(*v) && *v > 0, "{}: '{}' must be a number above zero ({})", file_, key, what);
    return *v;
  }
  std::string text(const std::string& key, const char* what) const {
    const toml::node* n = t_.at_path(key).node();
    TIDAL_CHECK(n && n->is_string(), "{}: '{}' must be a string ({})", file_, key, what);
    return *n->value<std::string>();
  }
  bool has(const std::string& key) const { return t_.at_path(key).node() != nullptr; }
  bool flag(const std::string& key, const char* what) const {
    const toml::node* n = t_.at_path(key).node();
    TIDAL_CHECK(n && n->is_boolean(), "{}: '{}' must be true or false ({})", file_, key, what);
    return *n->value<bool>();
  }
  Link link(const std::string& key) const {
    Link l{.bandwidth = positive(key + ".gbps", "GB/s per direction, as one rank sees it") * kGB,
           .latency = positive(key + ".latency_us", "microseconds for a message of no bytes") * kMicro};
    if (has(key + ".bytes")) l.measured_at = positive(key + ".bytes", "bytes of a message through the link at gbps");
    l.sizes = curve(key + ".sizes", "bytes", "GB/s", kGB);
    return l;
  }
  // [[size, rate], ...] at `key`, the rates times `scale`, ascending; none: empty.
  std::vector<std::pair<double, double>> curve(const std::string& key, const char* size, const char* unit,
                                               double scale) const {
    std::vector<std::pair<double, double>> out;
    if (!has(key)) return out;
    const toml::array* rows = t_.at_path(key).as_array();
    TIDAL_CHECK(rows, "{}: '{}' must be a list of [{}, {}] pairs", file_, key, size, unit);
    for (const toml::node& row : *rows) {
      const toml::array* pair = row.as_array();
      TIDAL_CHECK(pair && pair->size() == 2 && (*pair)[0].value<double>() && (*pair)[1].value<double>() &&
                      *(*pair)[0].value<double>() > 0 && *(*pair)[1].value<double>() > 0,
                  "{}: '{}' must be a list of [{}, {}] pairs of positive numbers", file_, key, size, unit);
      out.push_back({*(*pair)[0].value<double>(), *(*pair)[1].value<double>() * scale});
    }
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  const toml::table& t_;
  std::string file_;
};

std::string curve_toml(const std::vector<std::pair<double, double>>& curve, double scale) {
  std::vector<std::string> rows;
  for (const auto& [n, rate] : curve) rows.push_back(fmt::format("[{:.6g}, {:.6g}]", n, rate / scale));
  return fmt::format("[{}]", fmt::join(rows, ", "));
}

std::string link_toml(const Link& l) {
  std::string out = fmt::format("{{ gbps = {:.6g}, latency_us = {:.6g}", l.bandwidth / kGB, l.latency / kMicro);
  if (l.measured_at > 0) out += fmt::format(", bytes = {:.6g}", l.measured_at);
  if (!l.sizes.empty()) out += ", sizes = " + curve_toml(l.sizes, kGB);
  return out + " }";
}

}  // namespace

Hardware load_hardware(const std::string& path) {
  TIDAL_CHECK(std::filesystem::is_regular_file(path),
              "hardware file {} not found: configs/hardware/ has an 8 x H100 node, one H200 with its host and "
              "colossal-ai's Systems I, II and IV; mpirun -np 2 tidal calibrate --out FILE measures this machine",
              path);
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw Error(fmt::format("{}: not a hardware file: {} (line {})", path, e.description(), e.source().begin.line));
  }
  const Reader r(t, path);
  Hardware h;
  h.name = r.text("name", "what the machine is");
  h.source = r.has("source") ? r.text("source", "where the figures come from") : "";
  const std::string kind = r.text("device.kind", "\"cuda\" or \"cpu\": what a rank computes on");
  TIDAL_CHECK(kind == "cuda" || kind == "cpu", "{}: 'device.kind' is \"{}\"; it is \"cuda\" or \"cpu\"", path, kind);
  h.device = kind == "cuda" ? Device::Kind::cuda : Device::Kind::cpu;
  const double per_node = r.positive("devices_per_node", "ranks of one node");
  TIDAL_CHECK(per_node == std::floor(per_node), "{}: 'devices_per_node' must be a whole number", path);
  h.devices_per_node = int(per_node);
  h.device_memory = r.positive("device.memory_gib", "GiB of one device's memory") * kGiB;
  h.memory_bandwidth = r.positive("device.memory_gbps", "GB/s of one device's memory") * kGB;
  for (const auto& [dtype, key] : {std::pair{DType::f32, "fp32"}, {DType::bf16, "bf16"}, {DType::f16, "fp16"}})
    h.flops[dtype] = r.positive(fmt::format("device.tflops.{}", key), "peak TFLOP/s of the device's GEMMs") * kTera;
  for (const auto& [dtype, key] : {std::pair{DType::f32, "fp32"}, {DType::bf16, "bf16"}, {DType::f16, "fp16"}}) {
    const std::string at = fmt::format("device.attention_tflops.{}", key);
    h.attention_flops[dtype] = r.has(at) ? r.positive(at, "TFLOP/s of attention's forward and backward") * kTera
                                         : h.flops[dtype] / 2;
    for (auto [table, curve, unit, scale] : {std::tuple{"gemm_sizes", &h.gemm_sizes, "TFLOP/s", kTera},
                                             {"attention_sizes", &h.attention_sizes, "TFLOP/s", kTera},
                                             {"elementwise_sizes", &h.elementwise_sizes, "GB/s", kGB}}) {
      const std::string sizes = fmt::format("device.{}.{}", table, key);
      if (r.has(sizes)) (*curve)[dtype] = r.curve(sizes, "size", unit, scale);
    }
    // One figure for every dtype (a data sheet's memory bandwidth), or one each (tidal calibrate's).
    const bool by_dtype = r.has("device.elementwise_gbps") && t.at_path("device.elementwise_gbps").is_table();
    const std::string elementwise = by_dtype ? fmt::format("device.elementwise_gbps.{}", key) : "device.elementwise_gbps";
    h.elementwise_bandwidth[dtype] =
        r.has(elementwise) || by_dtype ? r.positive(elementwise, "GB/s of elementwise ops") * kGB : h.memory_bandwidth;
  }
  h.optimizer_bandwidth = r.has("device.optimizer_gbps")
                              ? r.positive("device.optimizer_gbps", "GB/s of AdamW's traffic") * kGB
                              : h.memory_bandwidth;
  if (r.has("device.oversubscription")) {
    h.oversubscription = r.positive("device.oversubscription", "threads per core of the node's ranks");
    TIDAL_CHECK(h.oversubscription >= 1, "{}: 'device.oversubscription' is {}; it is 1 or more (threads per core)",
                path, h.oversubscription);
  }
  if (h.device == Device::Kind::cpu)
    h.bf16_native = r.flag("device.bf16_native",
                           "whether the CPU's GEMMs take bf16 as it is; tidal calibrate writes it for its machine");
  h.host_memory = r.positive("host.memory_gib", "GiB of host memory per node") * kGiB;
  h.host_device_bandwidth = r.positive("host.device_gbps", "GB/s between host and device memory") * kGB;
  // A CPU's host is its device: AdamW there runs at the device's rate unless the file says otherwise.
  if (r.has("host.optimizer_gbps"))
    h.host_optimizer_bandwidth = r.positive("host.optimizer_gbps", "GB/s of AdamW's traffic on the host's cores") * kGB;
  else if (h.device == Device::Kind::cpu)
    h.host_optimizer_bandwidth = h.optimizer_bandwidth;
  if (r.has("disk.write")) h.disk_write = r.link("disk.write");
  h.intra_node_pair = r.link("links.intra_node_pair");
  h.intra_node_collective = r.link("links.intra_node_collective");
  if (r.has("links.inter_node")) h.inter_node = r.link("links.inter_node");
  if (r.has("links.pairs")) {
    const std::string pairs = r.text("links.pairs", "\"any\" or \"adjacent\": which two ranks have the pair link");
    TIDAL_CHECK(pairs == "any" || pairs == "adjacent", "{}: 'links.pairs' is \"{}\"; it is \"any\" or \"adjacent\"", path,
                pairs);
    h.adjacent_pairs = pairs == "adjacent";
  }
  return h;
}

std::string hardware_toml(const Hardware& h) {
  std::ostringstream out;
  out << "name = " << toml::value<std::string>(h.name) << "\n";  // quoted and escaped as TOML writes strings
  if (!h.source.empty()) out << "source = " << toml::value<std::string>(h.source) << "\n";
  out << fmt::format("devices_per_node = {}\n\n", h.devices_per_node);
  out << fmt::format("[device]\nkind = \"{}\"\nmemory_gib = {:.6g}\nmemory_gbps = {:.6g}\n",
                     h.device == Device::Kind::cuda ? "cuda" : "cpu", h.device_memory / kGiB, h.memory_bandwidth / kGB);
  out << fmt::format("tflops = {{ fp32 = {:.6g}, bf16 = {:.6g}, fp16 = {:.6g} }}\n", h.flops.at(DType::f32) / kTera,
                     h.flops.at(DType::bf16) / kTera, h.flops.at(DType::f16) / kTera);
  if (h.device == Device::Kind::cpu)
    out << fmt::format("bf16_native = {}  # false: bf16 operands widened to fp32 copies\n", h.bf16_native);
  out << fmt::format("elementwise_gbps = {{ fp32 = {:.6g}, bf16 = {:.6g}, fp16 = {:.6g} }}\noptimizer_gbps = {:.6g}\n",
                     h.elementwise_bandwidth.at(DType::f32) / kGB, h.elementwise_bandwidth.at(DType::bf16) / kGB,
                     h.elementwise_bandwidth.at(DType::f16) / kGB, h.optimizer_bandwidth / kGB);
  if (h.oversubscription > 1)
    out << fmt::format("oversubscription = {:.6g}  # threads per core: the rates are each rank's with all computing\n",
                       h.oversubscription);
  if (!h.attention_flops.empty())
    out << fmt::format("attention_tflops = {{ fp32 = {:.6g}, bf16 = {:.6g}, fp16 = {:.6g} }}\n",
                       h.attention_flops.at(DType::f32) / kTera, h.attention_flops.at(DType::bf16) / kTera,
                       h.attention_flops.at(DType::f16) / kTera);
  for (const auto& [table, curve, what, scale] :
       {std::tuple{"gemm_sizes", &h.gemm_sizes, "TFLOP/s of n x n x n products below the peak's size", kTera},
        {"attention_sizes", &h.attention_sizes, "TFLOP/s of attention over fewer keys (causal, forward and backward)",
         kTera},
        {"elementwise_sizes", &h.elementwise_sizes, "GB/s of elementwise ops on tensors of fewer elements", kGB}}) {
    if (curve->empty()) continue;
    out << fmt::format("[device.{}]  # {}\n", table, what);
    for (const auto& [dtype, key] : {std::pair{DType::f32, "fp32"}, {DType::bf16, "bf16"}, {DType::f16, "fp16"}}) {
      if (curve->count(dtype)) out << fmt::format("{} = {}\n", key, curve_toml(curve->at(dtype), scale));
    }
  }
  out << "\n";
  out << fmt::format("[host]\nmemory_gib = {:.6g}\ndevice_gbps = {:.6g}\n", h.host_memory / kGiB,
                     h.host_device_bandwidth / kGB);
  if (h.host_optimizer_bandwidth > 0) out << fmt::format("optimizer_gbps = {:.6g}\n", h.host_optimizer_bandwidth / kGB);
  out << "\n";
  if (h.disk_write)
    out << "[disk]  # a save: every rank writing its file at once, fsynced, then the commit; bytes: the node's\n"
        << "write = " << link_toml(*h.disk_write) << "\n\n";
  out << "[links]  # GB/s per direction as one rank sees it; microseconds for a message of no bytes\n";
  out << "intra_node_pair = " << link_toml(h.intra_node_pair) << "\n";
  out << "intra_node_collective = " << link_toml(h.intra_node_collective) << "\n";
  if (h.inter_node) out << "inter_node = " << link_toml(*h.inter_node) << "\n";
  if (h.adjacent_pairs) out << "pairs = \"adjacent\"\n";
  return out.str();
}

double Hardware::sharing_speedup(double computing, double ranks) const {
  return computing > 0 ? std::clamp(ranks / computing, 1.0, oversubscription) : oversubscription;
}

double Hardware::peak_flops(DType dtype) const {
  double best = flops.at(dtype);
  if (const auto it = gemm_sizes.find(dtype); it != gemm_sizes.end())
    for (const auto& [n, rate] : it->second) best = std::max(best, rate);
  return best;
}

namespace {

// A rate at `size` from a curve measured below the size of `peak`: interpolated in log(size)
// between the measured sizes, the peak at its own size (`peak_size`, or twice the largest
// measured) and beyond, the smallest size's rate below it.
double rate_at(const std::vector<std::pair<double, double>>& curve, double peak, double peak_size, double size) {
  if (curve.empty()) return peak;
  if (size <= curve.front().first) return curve.front().second;
  // The measured points, then the peak's own (the planner asks this for every product it replays:
  // no copy of the curve).
  const std::size_t n = curve.size() + 1;
  const auto point = [&](std::size_t i) {
    return i < curve.size() ? curve[i] : std::pair{std::max(curve.back().first * 2, peak_size), peak};
  };
  for (std::size_t i = 1; i < n; ++i) {
    const auto [x1, r1] = point(i);
    if (size <= x1) {
      const auto [x0, r0] = point(i - 1);
      return r0 + std::log(size / x0) / std::log(x1 / x0) * (r1 - r0);
    }
  }
  return peak;
}

double rate_at(const std::map<DType, std::vector<std::pair<double, double>>>& curves, DType dtype, double peak,
               double peak_size, double size) {
  const auto it = curves.find(dtype);
  return it == curves.end() ? peak : rate_at(it->second, peak, peak_size, size);
}

}  // namespace

double Link::bandwidth_at(double bytes) const { return rate_at(sizes, bandwidth, measured_at, bytes); }

double Hardware::gemm_rate(DType dtype, double m, double n, double k) const {
  return rate_at(gemm_sizes, dtype, flops.at(dtype), 2048, std::cbrt(m * n * k));
}

double Hardware::attention_rate(DType dtype, double keys) const {
  return rate_at(attention_sizes, dtype, attention_flops.at(dtype), 1024, keys);
}

double Hardware::elementwise_rate(DType dtype, double elements) const {
  return rate_at(elementwise_sizes, dtype, elementwise_bandwidth.at(dtype), kElementwiseElements, elements);
}

}  // namespace tidal::sim
