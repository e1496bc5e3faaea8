#include "data/tokenize_corpus.h"

#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
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

// A whole input mapped read-only, while its chunks are planned.
class MappedInput {
 public:
  explicit MappedInput(const Input& input) : size_(input.size) {
    const int fd = ::open(input.path.c_str(), O_RDONLY | O_CLOEXEC);
    TIDAL_CHECK(fd >= 0, "cannot read input '{}': {}", input.path, std::strerror(errno));
    void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int error = errno;
    ::close(fd);
    TIDAL_CHECK(map != MAP_FAILED, "cannot map input '{}': {}", input.path, std::strerror(error));
    data_ = static_cast<const char*>(map);
  }
  ~MappedInput() { ::munmap(const_cast<char*>(data_), size_); }
  MappedInput(const MappedInput&) = delete;
  MappedInput& operator=(const MappedInput&) = delete;

  std::string_view text() const { return {data_, size_}; }

 private:
  const char* data_ = nullptr;
  std::size_t size_;
};

// A stretch of one input: whole lines (lines mode), or a whole document or a piece of one.
struct Chunk {
  std::size_t input, begin, end;
  bool opens_document;  // the first chunk of a non-empty file (not lines mode)
};

struct ChunkResult {
  std::vector<std::uint32_t> tokens;  // with the separators between its own documents
  std::size_t documents = 0;          // documents that start in it
};

// Inputs longer than a chunk are cut after a line (lines mode) or at the tokenizer's split points.
std::vector<Chunk> plan_chunks(const BpeTokenizer& tokenizer, const std::vector<Input>& inputs,
                               const TokenizeOptions& options) {
  std::vector<Chunk> chunks;
  const std::size_t step = std::max<std::size_t>(options.chunk_bytes, 1);
  for (std::size_t f = 0; f < inputs.size(); ++f) {
    if (inputs[f].size == 0) continue;
    if (inputs[f].size <= step) {
      chunks.push_back({f, 0, inputs[f].size, !options.lines});
      continue;
    }
    const MappedInput mapped(inputs[f]);
    const std::string_view text = mapped.text();
    for (std::size_t begin = 0, end; begin < text.size(); begin = end) {
      end = text.size();
      if (text.size() - begin > step) {
        std::size_t cut;
        if (options.lines) {
          cut = text.find('\n', begin + step - 1);
          cut = cut == std::string_view::npos ? cut : cut + 1;
        } else {
          cut = tokenizer.split_point(text, begin + step);
        }
        if (cut != std::string_view::npos) end = std::min(cut, text.size());
      }
      chunks.push_back({f, begin, end, !options.lines && begin == 0});
    }
  }
  return chunks;
}

// Encodes one chunk (read into `buffer`); text that is not UTF-8 is an error naming the file and
// the byte.
ChunkResult encode_chunk(const BpeTokenizer& tokenizer, const Input& input, const Chunk& chunk,
                         const TokenizeOptions& options, std::string& buffer) {
  read_range(input, chunk.begin, chunk.end, buffer);
  const std::string_view text = buffer;
  ChunkResult r;
  r.tokens.reserve(text.size() / 3);
  std::size_t at = 0;  // offset in `text` of what is being encoded
  try {
    if (!options.lines) {
      r.documents = chunk.opens_document ? 1 : 0;
      tokenizer.encode_into(text, r.tokens);
      return r;
    }
    for (std::size_t next; at < text.size(); at = next) {
      std::size_t end = text.find('\n', at);
      next = end == std::string_view::npos ? text.size() : end + 1;
      end = end == std::string_view::npos ? text.size() : end;
      if (end > at && text[end - 1] == '\r') --end;
      if (end == at) continue;
      if (r.documents++ > 0) r.tokens.push_back(options.eot_id);
      tokenizer.encode_into(text.substr(at, end - at), r.tokens);
    }
  } catch (const InvalidUtf8& e) {
    TIDAL_CHECK(false,
                "input '{}' is not UTF-8 text (a malformed byte sequence at byte {}): tidal tokenize reads UTF-8; "
                "convert the file first, e.g. iconv -f latin1 -t utf-8",
                input.path, chunk.begin + at + e.offset());
  }
  return r;
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
  const auto start = std::chrono::steady_clock::now();
  TokenizeReport report;
  std::vector<Input> inputs;
  for (const std::string& path : options.inputs) {
    inputs.push_back(stat_input(path));
    report.bytes += inputs.back().size;
  }
  report.files = inputs.size();
  const std::vector<Chunk> chunks = plan_chunks(tokenizer, inputs, options);

  // Workers take chunks in order; after a failure they take no more, and the failure of the earliest
  // chunk among those that ran is the one reported.
  std::vector<ChunkResult> results(chunks.size());
  std::atomic<std::size_t> next_chunk{0};
  std::atomic<std::uint64_t> bytes_done{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::condition_variable finished;
  std::size_t running = 0, error_chunk = std::numeric_limits<std::size_t>::max();
  std::exception_ptr error;
  auto work = [&] {
    std::string buffer;
    for (std::size_t i; !failed && (i = next_chunk++) < chunks.size();) {
      try {
        results[i] = encode_chunk(tokenizer, inputs[chunks[i].input], chunks[i], options, buffer);
      } catch (...) {
        std::lock_guard lock(mutex);
        if (i < error_chunk) error_chunk = i, error = std::current_exception();
        failed = true;
      }
      bytes_done += chunks[i].end - chunks[i].begin;
    }
    std::lock_guard lock(mutex);
    --running;
    finished.notify_all();
  };
  const std::size_t hardware = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t n_threads =
      std::max<std::size_t>(1, std::min(options.threads > 0 ? std::size_t(options.threads) : hardware, chunks.size()));
  std::vector<std::thread> threads;
  report.threads = running = n_threads;
  for (std::size_t t = 0; t < n_threads; ++t) threads.emplace_back(work);
  {
    std::unique_lock lock(mutex);
    while (!finished.wait_for(lock, std::chrono::milliseconds(200), [&] { return running == 0; })) {
      if (!options.progress) continue;
      lock.unlock();
      options.progress(bytes_done, report.bytes);
      lock.lock();
    }
  }
  for (std::thread& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  if (options.progress) options.progress(report.bytes, report.bytes);

  std::vector<std::uint32_t> tokens;
  std::size_t total = 0;
  for (const ChunkResult& r : results) total += r.tokens.size() + (r.documents > 0 ? 1 : 0);
  tokens.reserve(total);
  for (ChunkResult& r : results) {
    if (r.documents > 0 && report.documents > 0) tokens.push_back(options.eot_id);
    report.documents += r.documents;
    tokens.insert(tokens.end(), r.tokens.begin(), r.tokens.end());
    r.tokens = {};
  }
  report.tokens = tokens.size();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  TIDAL_CHECK(report.tokens <= std::uint64_t(std::numeric_limits<std::int32_t>::max()),
              "the inputs make {} tokens, more than one llm.c shard holds (2^31 - 1): tokenize them in parts, one "
              "-o file each",
              report.tokens);
  report.wide = tokenizer.vocab_size() > 65536;
  write_token_file(options.output, tokens, report.wide);
  return report;
}

}  // namespace tidal::data
