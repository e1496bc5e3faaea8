#include "comm/all_gather_text.h"

#include <cstring>

namespace tidal::comm {

std::vector<std::string> all_gather_text(Communicator& group, const std::string& text, Seconds timeout) {
  const int n = group.size();
  if (n == 1) return {text};
  Tensor length = Tensor::empty({1}, DType::i32, host_allocator());
  TIDAL_CHECK(text.size() < (std::size_t(1) << 31), "a text of {} bytes to gather", text.size());
  length.data<std::int32_t>()[0] = std::int32_t(text.size());
  Tensor lengths = Tensor::empty({n}, DType::i32, host_allocator());
  group.all_gather(lengths, length, {.counts = {}, .timeout = timeout})->wait();
  // Each rank's bytes in whole int32 words.
  std::vector<std::int64_t> words(static_cast<std::size_t>(n));
  std::int64_t total = 0;
  for (int r = 0; r < n; ++r) total += words[std::size_t(r)] = (lengths.data<std::int32_t>()[r] + 3) / 4;
  Tensor mine = Tensor::zeros({words[std::size_t(group.rank())]}, DType::i32, host_allocator());
  std::memcpy(mine.raw(), text.data(), text.size());
  Tensor all = Tensor::empty({total}, DType::i32, host_allocator());
  group.all_gather(all, mine, {.counts = words, .timeout = timeout})->wait();
  std::vector<std::string> out;
  std::int64_t at = 0;
  for (int r = 0; r < n; ++r) {
    const char* bytes = reinterpret_cast<const char*>(all.data<std::int32_t>() + at);
    out.emplace_back(bytes, std::size_t(lengths.data<std::int32_t>()[r]));
    at += words[std::size_t(r)];
  }
  return out;
}

}  // namespace tidal::comm
