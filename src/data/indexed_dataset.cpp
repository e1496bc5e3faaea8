#include "data/indexed_dataset.h"

#include "core/error.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace tidal::data {
namespace {

constexpr char kIndexHeader[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
// The fixed part of an index: header, version, dtype code, sequence count, document-index count.
constexpr std::uint64_t kFixedBytes = 9 + 8 + 1 + 8 + 8;

// Bytes a token of Megatron's dtype code takes, and whether tidal reads it (integer ids).
int width_of(int code) {
  switch (code) {
    case 1: case 2: return 1;    // uint8, int8
    case 3: case 8: return 2;    // int16, uint16
    case 4: return 4;            // int32
    case 5: return 8;            // int64
    default: return 0;           // float64, float32, or not a code
  }
}

template <class T>
T load(const std::byte* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

}  // namespace

IndexedDataset::IndexedDataset(const std::string& prefix, const std::string& key)
    : prefix_(prefix), index_(prefix + ".idx"), data_(prefix + ".bin") {
  const std::string idx = prefix + ".idx";
  const std::byte* p = index_.data();
  TIDAL_CHECK(index_.size() >= kFixedBytes && std::memcmp(p, kIndexHeader, 9) == 0,
              "{} = '{}': '{}' is not a Megatron index (no MMIDIDX header): give the prefix of a .bin / .idx pair "
              "that megatron's preprocess_data.py or `tidal tokenize --format indexed` wrote",
              key, prefix, idx);
  const std::uint64_t version = load<std::uint64_t>(p + 9);
  TIDAL_CHECK(version == 1, "'{}': index version {}; tidal reads version 1", idx, version);
  dtype_ = int(load<std::uint8_t>(p + 17));
  width_ = width_of(dtype_);
  TIDAL_CHECK(width_ > 0, "'{}': token dtype code {} is not an integer type (tidal reads codes 1-5 and 8)", idx, dtype_);
  const std::uint64_t sequences = load<std::uint64_t>(p + 18), documents = load<std::uint64_t>(p + 26);
  // Every count checked against the index's size before any array is read (and before a product
  // could overflow).
  const std::uint64_t arrays = index_.size() - kFixedBytes;
  TIDAL_CHECK(sequences <= arrays / 12 && documents >= 1 && documents <= (arrays - sequences * 12) / 8,
              "'{}' is {} bytes, too short for {} sequences and {} document indices (truncated?)", idx, index_.size(),
              sequences, documents);
  sequences_ = std::int64_t(sequences);
  documents_ = std::int64_t(documents);
  lengths_at_ = kFixedBytes;
  pointers_at_ = lengths_at_ + sequences * 4;
  documents_at_ = pointers_at_ + sequences * 8;
  TIDAL_CHECK(document_index(0) == 0 && document_index(documents_ - 1) == sequences_,
              "'{}': the document indices run from {} to {}, not from 0 to the {} sequences", idx, document_index(0),
              document_index(documents_ - 1), sequences_);
  // The sequences lie back to back in .bin: the last one ends at its end.
  if (sequences_ > 0) {
    const std::int64_t last = sequences_ - 1;
    const std::uint64_t end = std::uint64_t(sequence_start(last) + sequence_length(last)) * std::uint64_t(width_);
    TIDAL_CHECK(sequence_start(0) == 0 && end == data_.size(),
                "'{}' is {} bytes but '{}' places its sequences up to byte {}: the pair does not match (truncated?)",
                prefix + ".bin", data_.size(), idx, end);
  }
  tokens_ = std::int64_t(data_.size()) / width_;
}

std::int64_t IndexedDataset::sequence_length(std::int64_t i) const {
  TIDAL_ASSERT(i >= 0 && i < sequences_, "sequence {} of {}", i, sequences_);
  return load<std::int32_t>(index_.data() + lengths_at_ + std::uint64_t(i) * 4);
}

std::int64_t IndexedDataset::sequence_start(std::int64_t i) const {
  TIDAL_ASSERT(i >= 0 && i < sequences_, "sequence {} of {}", i, sequences_);
  const std::int64_t bytes = load<std::int64_t>(index_.data() + pointers_at_ + std::uint64_t(i) * 8);
  TIDAL_CHECK(bytes >= 0 && bytes % width_ == 0 && std::uint64_t(bytes) <= data_.size(),
              "'{}.idx': sequence {} starts at byte {}, outside '{}.bin' or between tokens", prefix_, i, bytes, prefix_);
  return bytes / width_;
}

std::int64_t IndexedDataset::document_index(std::int64_t d) const {
  TIDAL_ASSERT(d >= 0 && d < documents_, "document index {} of {}", d, documents_);
  return load<std::int64_t>(index_.data() + documents_at_ + std::uint64_t(d) * 8);
}

std::optional<std::vector<std::int64_t>> IndexedDataset::document_starts(std::int64_t begin, std::int64_t n) const {
  // Document d's first token (its first sequence's; an empty document's is the next one's).
  const auto start = [&](std::int64_t d) {
    const std::int64_t s = document_index(d);
    return s < sequences_ ? sequence_start(s) : tokens_;
  };
  std::int64_t lo = 0, hi = documents();  // the first document starting past `begin`
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (start(mid) <= begin) lo = mid + 1;
    else hi = mid;
  }
  std::vector<std::int64_t> out;
  for (std::int64_t d = lo; d < documents(); ++d) {
    const std::int64_t at = start(d) - begin;
    if (at >= n) break;
    if (out.empty() || out.back() != at) out.push_back(at);
  }
  return out;
}

void IndexedDataset::read(std::int64_t begin, std::int64_t n, std::int32_t* out) const {
  TIDAL_ASSERT(begin >= 0 && n >= 0 && begin + n <= tokens_, "tokens [{}, +{}) of {}", begin, n, tokens_);
  const std::byte* at = data_.data() + std::uint64_t(begin) * std::uint64_t(width_);
  for (std::int64_t i = 0; i < n; ++i, at += width_) {
    switch (dtype_) {
      case 1: out[i] = load<std::uint8_t>(at); break;
      case 2: out[i] = load<std::int8_t>(at); break;
      case 3: out[i] = load<std::int16_t>(at); break;
      case 8: out[i] = load<std::uint16_t>(at); break;
      case 4: out[i] = load<std::int32_t>(at); break;
      default: {
        const std::int64_t v = load<std::int64_t>(at);
        TIDAL_CHECK(v >= INT32_MIN && v <= INT32_MAX, "'{}.bin': token {} at {} does not fit int32", prefix_, v,
                    begin + i);
        out[i] = std::int32_t(v);
      }
    }
  }
  data_.release(std::uint64_t(begin) * std::uint64_t(width_), std::uint64_t(n) * std::uint64_t(width_));
}

std::string IndexedDataset::describe() const {
  return fmt::format("{} (Megatron indexed): {} tokens, {} documents, {} sequences ({} bytes a token)", prefix_,
                     tokens_, documents(), sequences_, width_);
}

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, bool wide)
    : prefix_(prefix), wide_(wide), bin_(std::make_unique<io::AtomicFile>(prefix + ".bin")) {}

void IndexedDatasetWriter::flush() {
  bin_->write(pending_.data(), pending_.size());
  pending_.clear();
}

void IndexedDatasetWriter::append(const std::uint32_t* tokens, std::size_t n) {
  TIDAL_CHECK(open_ + std::int64_t(n) <= std::int64_t(INT32_MAX),
              "a document of more than 2^31 - 1 tokens is longer than an indexed dataset's sequence may be");
  for (std::size_t i = 0; i < n; ++i) {
    if (wide_) {
      const std::int32_t v = std::int32_t(tokens[i]);
      pending_.insert(pending_.end(), reinterpret_cast<const char*>(&v), reinterpret_cast<const char*>(&v) + 4);
    } else {
      const std::uint16_t v = std::uint16_t(tokens[i]);
      pending_.insert(pending_.end(), reinterpret_cast<const char*>(&v), reinterpret_cast<const char*>(&v) + 2);
    }
  }
  if (pending_.size() >= (std::size_t(1) << 22)) flush();
  open_ += std::int64_t(n);
  tokens_ += std::int64_t(n);
}

void IndexedDatasetWriter::end_document() {
  lengths_.push_back(std::int32_t(open_));
  open_ = 0;
}

void IndexedDatasetWriter::finish() {
  TIDAL_ASSERT(open_ == 0, "finishing an indexed dataset inside a document");
  flush();
  bin_->commit();
  const std::uint64_t sequences = lengths_.size(), documents = sequences + 1;
  const std::uint64_t version = 1;
  const std::uint8_t code = wide_ ? 4 : 8;
  io::AtomicFile idx(prefix_ + ".idx");
  idx.write(kIndexHeader, sizeof kIndexHeader);
  idx.write(&version, 8);
  idx.write(&code, 1);
  idx.write(&sequences, 8);
  idx.write(&documents, 8);
  idx.write(lengths_.data(), lengths_.size() * 4);
  std::vector<std::int64_t> pointers(sequences), indices(documents);
  std::int64_t at = 0;
  for (std::uint64_t i = 0; i < sequences; ++i) {
    pointers[i] = at;
    at += std::int64_t(lengths_[i]) * (wide_ ? 4 : 2);
  }
  for (std::uint64_t d = 0; d < documents; ++d) indices[d] = std::int64_t(d);
  idx.write(pointers.data(), pointers.size() * 8);
  idx.write(indices.data(), indices.size() * 8);
  idx.commit();
}

}  // namespace tidal::data
