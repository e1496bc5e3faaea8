#include "engine/planning/tide.h"

#include "config/options.h"
#include "core/bytes.h"
#include "core/error.h"
#include "engine/trainer.h"
#include "parallel/context.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tidal::engine {
namespace {

// A device tier this large is no cap at all (the trace of an unconstrained run).
constexpr std::uint64_t kUncapped = std::uint64_t(1) << 50;

std::string escape_xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// A round step for an axis spanning `range`: 1, 2 or 5 times a power of ten, 4 to 10 ticks.
double tick_step(double range) {
  const double raw = range / 5;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

}  // namespace

config::Config trace_config(config::Config cfg) {
  cfg.train.steps = 1;
  cfg.train.warmup_steps = 0;
  cfg.train.eval_every = 0;
  cfg.train.eval_batches = 1;
  cfg.checkpoint.dir.clear();
  if (cfg.memory.offload == config::Offload::none) cfg.memory.offload = config::Offload::chunk;
  if (cfg.memory.device_limit.empty()) cfg.memory.device_limit = std::to_string(kUncapped);
  return cfg;
}

nlohmann::json trace_warmup(const config::Config& user_cfg, comm::MpiRuntime* mpi) {
  config::Config cfg = trace_config(user_cfg);
  cfg.train.eval_batches = 0;  // the tide is the warm-up's; an evaluation under too small a cap would stop a rank
  const int ranks = parallel::launched_world_size(mpi);
  TIDAL_CHECK(ranks > 1 || (cfg.parallel.data == 1 && cfg.parallel.pipeline == 1 && cfg.parallel.tensor.size == 1 &&
                            cfg.parallel.sequence == 1),
              "tidal trace of a parallel layout runs under mpirun (each rank traces its own device): launch it with "
              "mpirun -np <ranks>, or set parallel.* to 1");
  parallel::ParallelContext pc(config::context_options(cfg), ranks > 1 ? mpi : nullptr);
  const TrainSummary run = train(cfg, {.quiet = true, .enforce_device_limit = false}, pc);
  const nlohmann::json& offload = run.model_data.at("offload");
  const std::uint64_t limit = config::parse_bytes(cfg.memory.device_limit, "memory.device_limit");
  nlohmann::json out = {
      {"model", fmt::format("{}, {} layers x {}, batch {} x {}, {}", cfg.model.type, cfg.model.n_layer, cfg.model.n_embd,
                            cfg.train.batch_size, cfg.model.seq_len, config::name_of(cfg.train.precision))},
      {"rank", pc.rank()},
      {"model_data_bytes", run.model_data.at("model_data_bytes")},
      {"peak_non_model_bytes", offload.at("trace").at("peak_non_model_bytes")},
      {"least_device_limit_bytes", offload.value("least_device_limit_bytes", std::int64_t(0))},
      {"moments", offload.at("trace").at("moments")}};
  if (limit < kUncapped) {
    out["device_limit_bytes"] = limit;
    out["warmup_chunk_bytes"] = std::int64_t(cfg.memory.warmup_fraction * double(limit));
  }
  return out;
}

namespace {

// The tide chart's canvas: moments [0, n) across, MiB up to y_max, and the SVG so far.
struct TideChart {
  static constexpr double W = 960, H = 480, left = 80, right = 24, above = 56, below = 64;
  static constexpr double pw = W - left - right, ph = H - above - below, mib = 1024.0 * 1024.0;
  int n;
  double y_max;
  std::string svg;

  double x(double i) const { return left + pw * i / n; }
  double y(double bytes) const { return above + ph * (1.0 - bytes / mib / y_max); }

  // The grid and the y axis in MiB, every `step`.
  void axes(double step) {
    for (double v = 0; v <= y_max + 1e-9; v += step) {
      svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#e5e5e5\"/>\n", left,
                         y(v * mib), W - right, y(v * mib));
      svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n", left - 6, y(v * mib) + 4, v);
    }
    svg += fmt::format("<text transform=\"translate(20 {:.1f}) rotate(-90)\" text-anchor=\"middle\">MiB</text>\n",
                       above + ph / 2);
  }
  // A stacked step area between `upper` and `lower` (0 when null): moment j's bar runs from x(j) to x(j + 1).
  void area(const std::vector<double>& upper, const std::vector<double>* lower, const char* fill) {
    std::string pts;
    for (int j = 0; j < n; ++j)
      pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", x(j), y(upper[std::size_t(j)]), x(j + 1),
                         y(upper[std::size_t(j)]));
    for (int j = n - 1; j >= 0; --j) {
      const double b = lower ? (*lower)[std::size_t(j)] : 0.0;
      pts += fmt::format("{:.1f},{:.1f} {:.1f},{:.1f} ", x(j + 1), y(b), x(j), y(b));
    }
    svg += fmt::format("<polygon points=\"{}\" fill=\"{}\" stroke=\"none\"/>\n", pts, fill);
  }
  // Phase boundaries (forward, backward, the step: each operator's first word), each labelled
  // where its span has room.
  void phases(const nlohmann::json& moments) {
    std::vector<std::pair<int, std::string>> starts;
    for (int j = 0; j < n; ++j) {
      const std::string op = moments[std::size_t(j)].at("operator").get<std::string>();
      const std::string p = op.substr(0, op.find(' '));
      if (starts.empty() || starts.back().second != p) starts.emplace_back(j, p);
    }
    for (std::size_t i = 0; i < starts.size(); ++i) {
      const auto& [j, p] = starts[i];
      const int end = i + 1 < starts.size() ? starts[i + 1].first : n;
      svg += fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#999\" stroke-dasharray=\"3 3\"/>\n", x(j),
          above, x(j), above + ph);
      if (x(end) - x(j) >= 60)
        svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" fill=\"#333\">{}</text>\n", x(j) + 3, above + ph + 16,
                           escape_xml(p));
    }
  }
  void hline(double bytes, const char* color, const std::string& label) {
    svg += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                       left, y(bytes), W - right, y(bytes), color);
    svg += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\" fill=\"{}\">{}</text>\n", W - right - 4,
                       y(bytes) - 5, color, escape_xml(label));
  }
  // The x axis, its caption and the legend.
  void frame() {
    svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", left, above + ph,
                       W - right, above + ph);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">moment ({} in the iteration)</text>\n",
                       left + pw / 2, H - 18, n);
    const double lx = left + 10, ly = above + 10;
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"#4c78a8\"/><text x=\"{}\" "
                       "y=\"{}\">chunks on the device</text>\n",
                       lx, ly, lx + 18, ly + 10);
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"#f4a259\"/><text x=\"{}\" "
                       "y=\"{}\">non-model data (activations, gradients in flight, workspaces)</text>\n",
                       lx, ly + 18, lx + 18, ly + 28);
  }
};

}  // namespace

std::string tide_svg(const nlohmann::json& tide) {
  const nlohmann::json& moments = tide.at("moments");
  const int n = int(moments.size());
  TIDAL_CHECK(n > 0, "the trace has no moments: nothing to draw");
  std::vector<double> chunk, device;
  for (const auto& m : moments) {
    chunk.push_back(m.at("chunk_bytes").get<double>());
    device.push_back(m.at("chunk_bytes").get<double>() + m.at("non_model_bytes").get<double>());
  }
  double top = *std::max_element(device.begin(), device.end());
  if (tide.contains("device_limit_bytes")) top = std::max(top, tide.at("device_limit_bytes").get<double>());
  const double step = tick_step(top / TideChart::mib);
  TideChart chart{.n = n, .y_max = std::ceil(top / TideChart::mib / step) * step, .svg = ""};
  chart.svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      TideChart::W, TideChart::H, TideChart::W, TideChart::H);
  chart.svg += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">Memory tide of the "
                           "warm-up iteration: {}</text>\n",
                           TideChart::left, escape_xml(tide.value("model", std::string())));
  chart.svg += fmt::format("<text x=\"{}\" y=\"40\" fill=\"#555\">device tier per moment (an operator using chunks "
                           "starts): chunks on the device, and the non-model data's peak until the next moment</text>\n",
                           TideChart::left);
  chart.axes(step);
  chart.area(device, &chunk, "#f4a259");
  chart.area(chunk, nullptr, "#4c78a8");
  chart.phases(moments);
  if (tide.contains("device_limit_bytes"))
    chart.hline(tide.at("device_limit_bytes").get<double>(), "#c0392b",
                "memory.device_limit " + human_bytes(tide.at("device_limit_bytes").get<std::uint64_t>()));
  if (tide.contains("warmup_chunk_bytes"))
    chart.hline(tide.at("warmup_chunk_bytes").get<double>(), "#2c7a3f", "chunks' share during the warm-up");
  chart.frame();
  chart.svg += "</svg>\n";
  return chart.svg;
}

}  // namespace tidal::engine
