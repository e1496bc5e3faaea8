#include "engine/checkpoint/checkpointer.h"

#include "comm/all_gather_text.h"
#include "io/save_plan.h"
#include "io/atomic_file.h"
#include "nn/tp/shard.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <thread>

namespace tidal::engine {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
// A commit waits for the slowest rank's file: longer than a step's collectives may take.
constexpr comm::Seconds kCommitTimeout{3600};
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The tensors of one parameter's state, in HeldBlock::state's order.
std::string state_name(const nn::Parameter& p, std::size_t kind) {
  static const char* prefix[] = {"", "m.", "v."};
  return prefix[kind] + p.name;
}

nlohmann::json pieces_json(const std::vector<Piece>& pieces) {
  nlohmann::json out = nlohmann::json::array();
  for (const Piece& p : pieces) out.push_back({p.row, p.slice.start.vec(), p.slice.extent.vec()});
  return out;
}

std::vector<Piece> pieces_from(const nlohmann::json& j) {
  std::vector<Piece> out;
  for (const nlohmann::json& p : j)
    out.push_back({.row = p[0].get<std::int64_t>(),
                   .slice = {Shape(p[1].get<std::vector<std::int64_t>>()), Shape(p[2].get<std::vector<std::int64_t>>())}});
  return out;
}

// The rows of p's block its pieces cover (the rest is padding, never saved).
std::int64_t stored_rows(const std::vector<Piece>& pieces) {
  std::int64_t rows = 0;
  for (const Piece& p : pieces) rows += p.slice.extent[0];
  return rows;
}

void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string read_latest(const fs::path& dir) {
  std::ifstream in(dir / "latest");
  std::string name;
  std::getline(in, name);
  return name;
}

// What a commit leaves to remove: step directories past `keep` (oldest first, never `latest`'s)
// and temporaries of saves that never committed (those of other runs: this run's, `ours`, may be
// in use).
std::vector<fs::path> stale(const fs::path& dir, const std::string& latest, int keep, const std::string& ours) {
  std::vector<fs::path> out;
  std::vector<std::string> steps;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !name.starts_with("step-")) continue;
    if (const std::size_t tmp = name.find(".tmp-"); tmp != std::string::npos) {
      if (name.substr(tmp) != ".tmp-" + ours) out.push_back(e.path());
      continue;
    }
    steps.push_back(name);
  }
  std::sort(steps.begin(), steps.end());
  const std::ptrdiff_t excess = std::ptrdiff_t(steps.size()) - keep;
  for (std::ptrdiff_t i = 0; i < excess; ++i)
    if (steps[std::size_t(i)] != latest) out.push_back(dir / steps[std::size_t(i)]);
  return out;
}

void remove_all(const std::vector<fs::path>& paths) {
  for (const fs::path& p : paths) {
    std::error_code ignored;  // gone already, or not ours to remove: the next commit tries again
    fs::remove_all(p, ignored);
  }
}

// A save that failed: where, why, and what stays.
Error not_written(std::int64_t step, const std::string& dir, const std::string& cause) {
  const std::string last = read_latest(dir);
  return Error(fmt::format("the checkpoint of step {} was not written ({}); {}: free space where checkpoint.dir '{}' "
                           "lives, or write fewer (checkpoint.every, checkpoint.keep)",
                           step, cause,
                           last.empty() ? "no earlier checkpoint is in that directory"
                                        : fmt::format("the last complete one, '{}', stays as 'latest'", last),
                           dir));
}

// The metadata of a save from every rank's report (the files in rank order).
CheckpointMetadata metadata_of(const CheckpointInfo& info, const std::vector<nlohmann::json>& reports) {
  CheckpointMetadata meta;
  meta.info = info;
  for (std::size_t r = 0; r < reports.size(); ++r) {
    const nlohmann::json& report = reports[r];
    if (report["blocks"].empty()) continue;
    const int file = int(meta.files.size());
    meta.files.push_back({.name = rank_file_name(int(r)),
                          .rank = int(r),
                          .bytes = report["bytes"].get<std::uint64_t>(),
                          .header_checksum = report["header"].get<std::uint64_t>()});
    for (const nlohmann::json& b : report["blocks"]) {
      StoredTensor& t = meta.tensors[b[0].get<std::string>()];
      t.shape = Shape(b[1].get<std::vector<std::int64_t>>());
      t.dtype = DType::f32;
      t.blocks.push_back({.file = file,
                          .key = b[0].get<std::string>(),
                          .shape = Shape(b[2].get<std::vector<std::int64_t>>()),
                          .pieces = pieces_from(b[3]),
                          .checksums = b[4].get<std::vector<std::uint64_t>>()});
    }
  }
  return meta;
}

// The last part of a commit, on one rank: the metadata into the temporary directory `tmp` (the
// files it names complete there), the directory renamed to its step's name, `latest` moved. Returns
// the step directory, and what is left to remove (stale(): old ones past `keep`, temporaries but
// those named with this run's `nonce`).
struct Published {
  std::string step_dir;
  std::vector<fs::path> stale;
};
Published publish(const std::string& dir, const std::string& tmp, const CheckpointMetadata& meta, int keep,
                  const std::string& nonce) {
  const CheckpointInfo& info = meta.info;
  const fs::path root(dir);
  try {
    const std::string text = meta.to_json().dump(1) + "\n";
    io::AtomicFile file((fs::path(tmp) / kMetadataFileName).string());
    file.write(text.data(), text.size());
    file.commit();
    // A step saved again (a second run into the same directory) gets a fresh name: the
    // directory `latest` names is never touched before its replacement is complete.
    const std::string base = fmt::format("step-{:08d}", info.step);
    std::string name = base;
    for (int n = 1; fs::exists(root / name); ++n) name = fmt::format("{}-{}", base, n);
    fs::rename(tmp, root / name);
    fsync_dir(root);
    io::AtomicFile latest((root / "latest").string());
    latest.write(name.data(), name.size());
    latest.commit();
    return {(root / name).string(), stale(root, name, keep, nonce)};
  } catch (const std::exception& e) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw not_written(info.step, dir, e.what());
  }
}

}  // namespace

// Which of this rank's blocks it writes, and the name its saves' temporary directories share.
struct Checkpointer::Plan {
  std::string nonce;
  std::set<const nn::Parameter*> writes;
  std::vector<const nn::Parameter*> held;  // the plan was made for these
};

struct Checkpointer::Pending {
  std::string dir, tmp;
  CheckpointInfo info;
  bool async = false;
  bool in_place = false;  // the writer reads state where it lies
  std::vector<BlockSource> sources;
  std::thread worker;  // asynchronous: the write, then the commit
  // This rank's file complete (or failed): state read in place may change from here.
  std::mutex mutex;
  std::condition_variable cv;
  bool written = false;
  std::atomic<bool> done{false};  // committed, or failed
  std::optional<ShardWritten> file;
  std::string error;  // the write's; after the commit, every rank's the same
  nlohmann::json record;  // the commit's metrics record, the stall's parts not yet in it
  // What the training loop waited, in parts: save()'s own work (the plan, the directory, the
  // snapshots), then the writers (the last save's still in flight; this one's whole write when
  // synchronous, or until it read the state in place); the commit's when synchronous.
  double snapshot = 0, writer_wait = 0, commit = 0;
  std::uint64_t state_bytes = 0;
};

Checkpointer::Checkpointer(CheckpointOptions options, comm::Communicator& world, comm::Communicator& background,
                           Allocator& staging, OnCommit on_commit)
    : options_(options), world_(world), background_(background), staging_(staging), on_commit_(std::move(on_commit)) {
  TIDAL_ASSERT(background.size() == world.size() && background.rank() == world.rank(),
               "a checkpoint's background group is not the world's ranks");
}

Checkpointer::~Checkpointer() {
  if (pending_ && pending_->worker.joinable()) pending_->worker.join();
  if (pruner_.joinable()) pruner_.join();
}

const Checkpointer::Plan& Checkpointer::plan(const std::vector<HeldBlock>& held) {
  std::vector<const nn::Parameter*> params;
  for (const HeldBlock& h : held) params.push_back(h.param);
  if (plan_) {
    TIDAL_ASSERT(plan_->held == params, "a checkpoint's holdings changed within the run");
    return *plan_;
  }
  // Every rank's blocks, by what names them alike on every rank holding them (a line each after
  // rank 0's nonce), then each to one writer (io/save_plan.h).
  std::ostringstream text;
  if (world_.rank() == 0) text << std::random_device()() << "\n";
  std::map<std::string, const nn::Parameter*> mine;
  for (const nn::Parameter* p : params) {
    const io::HeldBlockKey block = nn::tp::save_block_key(*p);
    if (block.bytes == 0) continue;  // wholly in the padding
    mine[block.key] = p;
    text << block.key << "\t" << block.bytes << "\n";
  }
  auto plan = std::make_unique<Plan>();
  plan->held = params;
  std::vector<std::vector<io::HeldBlockKey>> blocks(std::size_t(world_.size()));
  const std::vector<std::string> texts = comm::all_gather_text(world_, text.str());
  for (std::size_t r = 0; r < texts.size(); ++r) {
    std::istringstream in(texts[r]);
    std::string line;
    if (r == 0) std::getline(in, plan->nonce);
    while (std::getline(in, line)) {
      const std::size_t tab = line.rfind('\t');
      blocks[r].push_back({line.substr(0, tab), std::stoll(line.substr(tab + 1))});
    }
  }
  const std::vector<std::vector<std::string>> writers = io::assign_writers(blocks);
  for (const std::string& key : writers[std::size_t(world_.rank())]) plan->writes.insert(mine.at(key));
  plan_ = std::move(plan);
  return *plan_;
}

void Checkpointer::save(const std::string& dir, const CheckpointInfo& info, const std::vector<HeldBlock>& held) {
  const Clock::time_point start = Clock::now();
  finish();  // at most one save in flight: the last one's wait is this one's
  const double waited = seconds_since(start);
  const Plan& p = plan(held);
  auto pending = std::make_unique<Pending>();
  pending->dir = dir;
  pending->info = info;
  pending->async = options_.async;
  pending->writer_wait = waited;
  pending->tmp = (fs::path(dir) / fmt::format("step-{:08d}.tmp-{}", info.step, p.nonce)).string();
  std::error_code ec;  // every rank makes it (the run's nonce keeps it apart from any other save's)
  fs::create_directories(pending->tmp, ec);
  TIDAL_CHECK(!ec || fs::is_directory(pending->tmp), "cannot create the checkpoint directory '{}' (checkpoint.dir): {}",
              pending->tmp, ec.message());
  staging_.reset_peak();
  for (const HeldBlock& h : held) {
    if (!p.writes.count(h.param)) continue;  // another rank writes it
    const nn::Parameter& param = *h.param;
    const std::vector<Piece> pieces = nn::tp::pieces_of(param);
    Shape shape = param.shape;
    shape[0] = stored_rows(pieces);
    for (std::size_t k = 0; k < 3; ++k) {
      BlockSource s{.key = state_name(param, k),
                    .full_shape = param.full_shape.size() ? param.full_shape : param.shape,
                    .shape = shape,
                    .pieces = pieces};
      const memory::StateView& v = h.state[k];
      if (v.read) {
        s.bytes.read = v.read;
        pending->in_place = true;
      } else {
        Tensor rows = v.memory.slice(0, 0, shape[0]);
        const Allocator* a = rows.allocator();
        const bool device = !rows.device().is_cpu() || (a && a->tier() == MemoryTier::device);
        if (device && options_.async) {  // a snapshot: the device's copy may change or move
          Tensor copy = Tensor::empty(shape, DType::f32, staging_);
          copy.copy_from(rows);
          rows = copy;
        } else if (!device) {
          pending->in_place = true;
        }
        s.bytes.memory = rows;
      }
      pending->state_bytes += std::uint64_t(shape.numel()) * sizeof(float);
      pending->sources.push_back(std::move(s));
    }
  }
  Pending& job = *pending;
  pending_ = std::move(pending);
  if (options_.async) {
    // The commit too goes beside training, over the background group: the loop only learns,
    // at a step's end, that every rank's save is done (poll()).
    job.worker = std::thread([this, &job] {
      write(job);
      commit(job);
      job.done = true;
    });
    job.snapshot = seconds_since(start) - waited;
    return;
  }
  job.snapshot = seconds_since(start) - waited;
  write(job);
  job.writer_wait += seconds_since(start) - waited - job.snapshot;
  commit(job);
  complete();
}

void Checkpointer::write(Pending& job) {
  try {
    if (!job.sources.empty())
      job.file = write_shard(job.tmp, world_.rank(), job.sources, options_.buffer_bytes, staging_);
  } catch (const std::exception& e) {
    job.error = e.what();
  }
  std::lock_guard lock(job.mutex);
  job.written = true;
  job.cv.notify_all();
}

void Checkpointer::before_update() {
  if (!pending_ || !pending_->in_place) return;
  Pending& job = *pending_;
  const Clock::time_point start = Clock::now();
  std::unique_lock lock(job.mutex);
  job.cv.wait(lock, [&] { return job.written; });
  job.writer_wait += seconds_since(start);
}

void Checkpointer::poll() {
  if (!pending_) return;
  // Every rank's save done? (A failed one counts as done: complete() reports it.)
  Tensor running = Tensor::full({1}, pending_->done ? 0.0f : 1.0f, host_allocator());
  world_.all_reduce(running, {.op = comm::ReduceOp::max})->wait();
  if (running.item() == 0.0f) complete();
}

void Checkpointer::finish() {
  if (pending_) complete();
  if (pruner_.joinable()) pruner_.join();
}

namespace {

// A committed save's metrics record (of step `step`, into `dir`, now at `path`) from every rank's
// report, the stall's parts left to complete(); `committing`: the commit's seconds.
nlohmann::json save_record(std::int64_t step, const std::string& dir, bool async, const std::string& path,
                           const std::vector<nlohmann::json>& reports, double committing) {
  nlohmann::json record = {{"step", step},
                           {"checkpoint_step", step},
                           {"checkpoint_dir", dir},
                           {"checkpoint_async", async},
                           {"checkpoint_path", path},
                           {"checkpoint_commit_s", committing}};
  std::vector<double> write;
  std::vector<std::int64_t> bytes, peak, state;
  for (const nlohmann::json& r : reports) {
    write.push_back(r["write_s"].get<double>());
    bytes.push_back(r["bytes"].get<std::int64_t>());
    peak.push_back(r["host_peak_bytes"].get<std::int64_t>());
    state.push_back(r["state_bytes"].get<std::int64_t>());
  }
  record["checkpoint_write_s"] = *std::max_element(write.begin(), write.end());
  std::int64_t total = 0;
  for (std::int64_t b : bytes) total += b;
  record["checkpoint_bytes"] = total;
  record["checkpoint_write_s_per_rank"] = write;
  record["checkpoint_bytes_per_rank"] = bytes;
  record["checkpoint_host_peak_bytes_per_rank"] = peak;
  record["checkpoint_state_bytes_per_rank"] = state;
  return record;
}

}  // namespace

void Checkpointer::commit(Pending& job) {
  const Clock::time_point start = Clock::now();
  try {
    nlohmann::json mine;
    if (!job.error.empty()) {
      mine["error"] = job.error;
    } else {
      nlohmann::json blocks = nlohmann::json::array();
      if (job.file)
        for (std::size_t i = 0; i < job.file->blocks.size(); ++i) {
          const StoredBlock& b = job.file->blocks[i];
          blocks.push_back({b.key, job.sources[i].full_shape.vec(), b.shape.vec(), pieces_json(b.pieces), b.checksums});
        }
      mine = {{"blocks", blocks},
              {"bytes", job.file ? job.file->file.bytes : 0},
              {"header", job.file ? *job.file->file.header_checksum : 0},
              {"write_s", job.file ? job.file->seconds : 0.0},
              {"host_peak_bytes", staging_.peak_bytes()},
              {"state_bytes", job.state_bytes}};
    }
    job.sources.clear();  // the staged copies go
    std::vector<nlohmann::json> reports;
    for (const std::string& t : comm::all_gather_text(background_, mine.dump(), kCommitTimeout))
      reports.push_back(nlohmann::json::parse(t));
    for (int r = 0; r < background_.size(); ++r) {
      const nlohmann::json& report = reports[std::size_t(r)];
      if (!report.contains("error")) continue;
      if (background_.rank() == 0) {
        std::error_code ignored;
        fs::remove_all(job.tmp, ignored);
      }
      throw not_written(job.info.step, job.dir,
                        fmt::format("{}{}", background_.size() > 1 ? fmt::format("rank {}: ", r) : "",
                                    report["error"].get<std::string>()));
    }
    // Rank 0 publishes; every rank learns how that went (so all fail alike, or all go on knowing
    // the checkpoint is in place).
    std::string published;
    if (background_.rank() == 0) {
      if (pruner_.joinable()) pruner_.join();  // the last commit's removals
      try {
        Published p = publish(job.dir, job.tmp, metadata_of(job.info, reports), options_.keep, plan_->nonce);
        published = "ok " + p.step_dir;
        // Removing old checkpoints is nobody's to wait for: it runs beside training.
        pruner_ = std::thread([stale = std::move(p.stale)] { remove_all(stale); });
      } catch (const Error& e) {
        published = e.what();
      }
    }
    published = comm::all_gather_text(background_, published, kCommitTimeout).front();
    if (!published.starts_with("ok ")) throw Error(published);
    job.commit = seconds_since(start);
    job.record = save_record(job.info.step, job.dir, job.async, published.substr(3), reports, job.commit);
    job.error.clear();
  } catch (const std::exception& e) {
    job.error = e.what();  // every rank's alike: each learned it from the same gathers
  }
}

void Checkpointer::complete() {
  std::unique_ptr<Pending> job = std::move(pending_);
  if (job->worker.joinable()) {  // done already after poll(); at finish() the wait is a stall
    const Clock::time_point start = Clock::now();
    job->worker.join();
    job->writer_wait += seconds_since(start);
  }
  if (!job->error.empty()) throw Error(job->error);
  // The stall's parts, each the slowest rank's: what each rank's loop waited.
  nlohmann::json& record = job->record;
  std::vector<double> stall, snapshot, writer_wait;
  for (const std::string& t : comm::all_gather_text(world_, nlohmann::json({job->snapshot, job->writer_wait}).dump())) {
    const nlohmann::json parts = nlohmann::json::parse(t);
    snapshot.push_back(parts[0].get<double>());
    writer_wait.push_back(parts[1].get<double>());
    // A synchronous commit held every rank; one in the background, none.
    stall.push_back(snapshot.back() + writer_wait.back() + (job->async ? 0.0 : job->commit));
  }
  record["checkpoint_stall_s"] = *std::max_element(stall.begin(), stall.end());
  record["checkpoint_snapshot_s"] = *std::max_element(snapshot.begin(), snapshot.end());
  record["checkpoint_writer_wait_s"] = *std::max_element(writer_wait.begin(), writer_wait.end());
  record["checkpoint_stall_s_per_rank"] = stall;
  if (on_commit_) on_commit_(record);
}

void write_checkpoint(const std::string& dir, const CheckpointInfo& info,
                      const std::vector<std::pair<std::string, Tensor>>& tensors, int keep) {
  std::vector<BlockSource> sources;
  for (const auto& [name, t] : tensors) {
    TIDAL_CHECK(t.dtype() == DType::f32 && t.ndim() >= 1, "write_checkpoint: '{}' is {}, not an fp32 tensor", name,
                t.str());
    const Shape zero(std::vector<std::int64_t>(std::size_t(t.ndim()), 0));
    sources.push_back({.key = name,
                       .full_shape = t.shape(),
                       .shape = t.shape(),
                       .pieces = {Piece{.row = 0, .slice = {zero, t.shape()}}},
                       .bytes = {.memory = t.is_contiguous() ? t : t.clone(host_allocator())}});
  }
  const std::string tmp = (fs::path(dir) / fmt::format("step-{:08d}.tmp-{}", info.step, ::getpid())).string();
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  TIDAL_CHECK(!ec, "cannot create the checkpoint directory '{}': {}", tmp, ec.message());
  HostAllocator staging;
  const ShardWritten written = write_shard(tmp, 0, sources, std::size_t(64) << 20, staging);
  CheckpointMetadata meta;
  meta.info = info;
  meta.files.push_back(written.file);
  for (std::size_t i = 0; i < sources.size(); ++i) {
    StoredTensor& t = meta.tensors[sources[i].key];
    t.shape = sources[i].full_shape;
    t.blocks.push_back(written.blocks[i]);
  }
  remove_all(publish(dir, tmp, meta, keep, std::to_string(::getpid())).stale);
}

}  // namespace tidal::engine
