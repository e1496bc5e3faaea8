#include "data/tokenize_corpus.h"

#include "data/indexed_dataset.h"
#include "data/token_shards.h"
#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace tidal::data {
namespace {

// An input, checked once up front; workers read their chunks of it (the page cache serves them).
struct Input {
  std::string path;
  std::size_t size;
};

Input stat_input(const std::string& path) {
  struct stat st {};
  TIDAL_CHECK(::stat(path.c_str(), &st) == 0, "cannot read input '{}': {}", path, std::strerror(errno));
  TIDAL_CHECK(S_ISREG(st.st_mode), "input '{}' is not a regular file: tidal tokenize reads text files", path);
  return {path, std::size_t(st.st_size)};
}

// Bytes [begin, end) of an input, into `buffer`.
void read_range(const Input& input, std::size_t begin, std::size_t end, std::string& buffer) {
  const int fd = ::open(input.path.c_str(), O_RDONLY | O_CLOEXEC);
  TIDAL_CHECK(fd >= 0, "cannot read input '{}': {}", input.path, std::strerror(errno));
  buffer.resize(end - begin);
  std::size_t got = 0;
  int error = 0;  // 0 at an early end of the file
  while (got < buffer.size()) {
    const ssize_t n = ::pread(fd, buffer.data() + got, buffer.size() - got, off_t(begin + got));
    if (n > 0) {
      got += std::size_t(n);
    } else if (n == 0 || errno != EINTR) {
      error = n == 0 ? 0 : errno;
      break;
    }
  }
  ::close(fd);
  TIDAL_CHECK(got == buffer.size(), "cannot read input '{}': {}", input.path,
              error ? std::strerror(error) : "it shrank while being read");
}

// A stretch of one input: whole lines (lines and JSON lines), or a whole document or a piece of one.
struct Chunk {
  std::size_t input, begin, end;
  bool opens_document;  // the first chunk of a non-empty file (a document a file)
};

// A chunk's tokens, and where in them its documents start.
struct ChunkResult {
  std::vector<std::uint32_t> tokens;
  std::vector<std::size_t> starts;
};

// Inputs longer than a chunk are cut after a line (lines, JSON lines) or at the tokenizer's split
// points.
std::vector<Chunk> plan_chunks(const BpeTokenizer& tokenizer, const std::vector<Input>& inputs,
                               const TokenizeOptions& options) {
  const bool by_line = options.lines || !options.json_key.empty();
  std::vector<Chunk> chunks;
  const std::size_t step = std::max<std::size_t>(options.chunk_bytes, 1);
  for (std::size_t f = 0; f < inputs.size(); ++f) {
    if (inputs[f].size == 0) continue;
    if (inputs[f].size <= step) {
      chunks.push_back({f, 0, inputs[f].size, !by_line});
      continue;
    }
    const io::MappedFile mapped(inputs[f].path);
    const std::string_view text(reinterpret_cast<const char*>(mapped.data()), mapped.size());
    for (std::size_t begin = 0, end; begin < text.size(); begin = end) {
      end = text.size();
      if (text.size() - begin > step) {
        std::size_t cut;
        if (by_line) {
          cut = text.find('\n', begin + step - 1);
          cut = cut == std::string_view::npos ? cut : cut + 1;
        } else {
          cut = tokenizer.split_point(text, begin + step);
        }
        if (cut != std::string_view::npos) end = std::min(cut, text.size());
      }
      chunks.push_back({f, begin, end, !by_line && begin == 0});
    }
  }
  return chunks;
}

// A JSON line's document: its string under `key`; an error naming the file and the line's byte.
std::string json_document(std::string_view line, const std::string& key, const Input& input, std::size_t at) {
  nlohmann::json record;
  try {
    record = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("input '{}': the line at byte {} is not JSON ({}): --json-key reads JSON lines, an "
                            "object a line",
                            input.path, at, e.what()));
  }
  const auto it = record.is_object() ? record.find(key) : record.end();
  TIDAL_CHECK(it != record.end() && it->is_string(),
              "input '{}': the record at byte {} has no string \"{}\" (--json-key names the field holding the text)",
              input.path, at, key);
  return it->get<std::string>();
}

// Encodes one chunk (read into `buffer`); text that is not UTF-8 is an error naming the file and
// the byte.
ChunkResult encode_chunk(const BpeTokenizer& tokenizer, const Input& input, const Chunk& chunk,
                         const TokenizeOptions& options, std::string& buffer) {
  read_range(input, chunk.begin, chunk.end, buffer);
  const std::string_view text = buffer;
  ChunkResult r;
  r.tokens.reserve(text.size() / 3);
  std::size_t at = 0;  // offset in `text` of the line being encoded
  try {
    if (!options.lines && options.json_key.empty()) {
      if (chunk.opens_document) r.starts.push_back(0);
      tokenizer.encode_into(text, r.tokens);
      return r;
    }
    for (std::size_t next; at < text.size(); at = next) {
      std::size_t end = text.find('\n', at);
      next = end == std::string_view::npos ? text.size() : end + 1;
      end = end == std::string_view::npos ? text.size() : end;
      if (end > at && text[end - 1] == '\r') --end;
      if (end == at) continue;
      const std::size_t before = r.tokens.size();
      if (options.json_key.empty()) {
        tokenizer.encode_into(text.substr(at, end - at), r.tokens);
      } else {
        tokenizer.encode_into(json_document(text.substr(at, end - at), options.json_key, input, chunk.begin + at),
                              r.tokens);
      }
      if (r.tokens.size() > before) r.starts.push_back(before);
    }
  } catch (const InvalidUtf8& e) {
    TIDAL_CHECK(false,
                "input '{}' is not UTF-8 text (a malformed byte sequence at byte {}): tidal tokenize reads UTF-8; "
                "convert the file first, e.g. iconv -f latin1 -t utf-8",
                input.path, chunk.begin + at + e.offset());
  }
  return r;
}

// Where the tokens go, in document order: llm.c shards (the end-of-text id between documents, or
// after each) cut every shard_tokens, or a Megatron indexed dataset (a sequence a document).
class Output {
 public:
  Output(const TokenizeOptions& options, bool wide) : options_(options), wide_(wide) {
    if (options.indexed) indexed_.emplace(options.output, wide);
  }

  void document_starts() {
    if (open_) end_document();
    if (!options_.indexed && !options_.append_eod && documents_ > 0) emit(&options_.eot_id, 1);
    open_ = true;
    ++documents_;
  }
  void tokens(const std::uint32_t* t, std::size_t n) { emit(t, n); }
  // Every file complete; returns them.
  std::vector<std::string> finish() {
    if (open_) end_document();
    if (indexed_) {
      indexed_->finish();
      return {options_.output + ".bin", options_.output + ".idx"};
    }
    if (!shard_) next_shard();  // no tokens at all: an empty shard
    shard_->finish();
    written_.push_back(shard_->path());
    return written_;
  }
  std::size_t documents() const { return documents_; }
  std::uint64_t tokens_written() const { return tokens_; }

 private:
  void end_document() {
    if (options_.append_eod) emit(&options_.eot_id, 1);
    if (indexed_) indexed_->end_document();
    open_ = false;
  }
  void emit(const std::uint32_t* t, std::size_t n) {
    tokens_ += n;
    if (indexed_) return indexed_->append(t, n);
    while (n > 0) {
      if (!shard_ || (options_.shard_tokens > 0 && shard_->tokens() == options_.shard_tokens)) next_shard();
      const std::size_t room = options_.shard_tokens > 0 ? std::size_t(options_.shard_tokens - shard_->tokens()) : n;
      const std::size_t take = std::min(n, room);
      shard_->append(t, take);
      t += take;
      n -= take;
    }
  }
  void next_shard() {
    if (shard_) {
      shard_->finish();
      written_.push_back(shard_->path());
    }
    const std::string path = options_.shard_tokens > 0
                                 ? fmt::format("{}_{:06d}.bin", options_.output, written_.size())
                                 : options_.output;
    shard_ = std::make_unique<TokenShardWriter>(path, wide_);
  }

  const TokenizeOptions& options_;
  bool wide_;
  std::optional<IndexedDatasetWriter> indexed_;
  std::unique_ptr<TokenShardWriter> shard_;
  std::vector<std::string> written_;
  bool open_ = false;
  std::size_t documents_ = 0;
  std::uint64_t tokens_ = 0;
};

// Encodes chunks on worker threads, at most `ahead` chunks past the one the writer waits for, and
// hands the writer (the calling thread) each chunk's result in order. After a failure no more are
// taken, and the failure of the earliest chunk among those that ran is the one rethrown.
class InOrderEncoding {
 public:
  using Encode = std::function<ChunkResult(std::size_t chunk, std::string& buffer)>;

  // `chunk_bytes`: each chunk's input bytes, counted in bytes_done() once encoded.
  InOrderEncoding(Encode encode, std::vector<std::uint64_t> chunk_bytes, std::size_t threads)
      : encode_(std::move(encode)), chunk_bytes_(std::move(chunk_bytes)), results_(chunk_bytes_.size()),
        ahead_(4 * threads), running_(threads) {
    for (std::size_t t = 0; t < threads; ++t) threads_.emplace_back([this] { work(); });
  }
  ~InOrderEncoding() {
    {
      std::lock_guard lock(mutex_);
      failed_ = true;  // a writer that stopped early: the workers take no more
      changed_.notify_all();
    }
    for (std::thread& t : threads_) t.join();
  }

  // The next chunk's result in order, or none after the last; `waiting` runs every 200 ms while
  // none is ready. Rethrows a worker's failure.
  std::optional<ChunkResult> next(const std::function<void()>& waiting) {
    std::unique_lock lock(mutex_);
    for (;;) {
      const bool ready = changed_.wait_for(lock, std::chrono::milliseconds(200), [&] {
        return failed_ || written_ == results_.size() || results_[written_].has_value();
      });
      if (ready) break;
      lock.unlock();
      waiting();
      lock.lock();
    }
    if (failed_ || written_ == results_.size()) {
      changed_.wait(lock, [&] { return running_ == 0; });
      if (error_) std::rethrow_exception(error_);
      return std::nullopt;
    }
    std::optional<ChunkResult> r = std::move(results_[written_]);
    results_[written_++].reset();
    changed_.notify_all();
    return r;
  }
  std::uint64_t bytes_done() const { return bytes_done_; }

 private:
  void work() {
    std::string buffer;
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return failed_ || next_ >= results_.size() || next_ < written_ + ahead_; });
      if (failed_ || next_ >= results_.size()) break;
      const std::size_t i = next_++;
      lock.unlock();
      std::optional<ChunkResult> r;
      std::exception_ptr e;
      try {
        r = encode_(i, buffer);
      } catch (...) {
        e = std::current_exception();
      }
      bytes_done_ += chunk_bytes_[i];
      lock.lock();
      if (e) {
        if (i < error_chunk_) error_chunk_ = i, error_ = e;
        failed_ = true;
      } else {
        results_[i] = std::move(r);
      }
      changed_.notify_all();
    }
    --running_;
    changed_.notify_all();
  }

  Encode encode_;
  const std::vector<std::uint64_t> chunk_bytes_;
  std::vector<std::optional<ChunkResult>> results_;
  const std::size_t ahead_;
  std::size_t next_ = 0, written_ = 0, running_;
  std::size_t error_chunk_ = std::numeric_limits<std::size_t>::max();
  std::exception_ptr error_;
  bool failed_ = false;
  std::atomic<std::uint64_t> bytes_done_{0};
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::thread> threads_;  // last: started once the rest is ready
};

// A chunk's tokens, with its documents' starts where they fall.
void write_chunk(Output& output, const ChunkResult& r) {
  for (std::size_t k = 0, at = 0; at < r.tokens.size() || k < r.starts.size();) {
    if (k < r.starts.size() && r.starts[k] == at) {
      output.document_starts();
      ++k;
      continue;
    }
    const std::size_t end = k < r.starts.size() ? r.starts[k] : r.tokens.size();
    output.tokens(r.tokens.data() + at, end - at);
    at = end;
  }
}

}  // namespace

std::uint32_t document_separator(const BpeTokenizer& tokenizer, const std::string& tokenizer_path,
                                 const std::string& eot_token) {
  if (eot_token.empty()) {
    const auto id = tokenizer.eot_id();
    TIDAL_CHECK(id.has_value(),
                "tokenizer.json '{}' has no \"<|endoftext|>\" token to put between documents: name the token to use "
                "with --eot TOKEN",
                tokenizer_path);
    return *id;
  }
  const auto id = tokenizer.token_id(eot_token);
  TIDAL_CHECK(id.has_value(),
              "--eot \"{}\": tokenizer.json '{}' has no such token (give a model.vocab key or an added "
              "token's content)",
              eot_token, tokenizer_path);
  return *id;
}

TokenizeReport tokenize_corpus(const BpeTokenizer& tokenizer, const TokenizeOptions& options) {
  TIDAL_CHECK(!options.inputs.empty(), "tidal tokenize needs at least one input file");
  TIDAL_CHECK(options.threads >= 0, "TokenizeOptions.threads must be >= 0 (0: every hardware thread), got {}",
              options.threads);
  TIDAL_CHECK(options.shard_tokens >= 0 && (options.shard_tokens == 0 || !options.indexed),
              "--shard-size cuts llm.c shards; an indexed dataset is one .bin / .idx pair");
  const auto start = std::chrono::steady_clock::now();
  TokenizeReport report;
  std::vector<Input> inputs;
  for (const std::string& path : options.inputs) {
    inputs.push_back(stat_input(path));
    report.bytes += inputs.back().size;
  }
  report.files = inputs.size();
  report.wide = options.indexed ? tokenizer.vocab_size() >= 65500 : tokenizer.vocab_size() > 65536;
  const std::vector<Chunk> chunks = plan_chunks(tokenizer, inputs, options);
  const std::size_t hardware = std::max(1u, std::thread::hardware_concurrency());
  report.threads = std::max<std::size_t>(
      1, std::min(options.threads > 0 ? std::size_t(options.threads) : hardware, std::max<std::size_t>(1, chunks.size())));

  Output output(options, report.wide);
  std::vector<std::uint64_t> chunk_bytes;
  for (const Chunk& c : chunks) chunk_bytes.push_back(c.end - c.begin);
  InOrderEncoding encoding(
      [&](std::size_t i, std::string& buffer) {
        return encode_chunk(tokenizer, inputs[chunks[i].input], chunks[i], options, buffer);
      },
      std::move(chunk_bytes), report.threads);
  const auto waiting = [&] {
    if (options.progress) options.progress(encoding.bytes_done(), report.bytes, output.tokens_written());
  };
  while (std::optional<ChunkResult> r = encoding.next(waiting)) write_chunk(output, *r);
  report.written = output.finish();
  report.documents = output.documents();
  report.tokens = output.tokens_written();
  if (options.progress) options.progress(report.bytes, report.bytes, report.tokens);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace tidal::data
