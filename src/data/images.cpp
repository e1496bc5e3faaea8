#include "data/images.h"

#include "core/error.h"
#include "core/philox.h"
#include "data/sample_order.h"
#include "io/atomic_file.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace tidal::data {
namespace {

float normal(std::uint64_t a, std::uint32_t b, std::uint32_t c, std::uint64_t seed) {
  const PhiloxCounter r = philox4x32({std::uint32_t(a), std::uint32_t(a >> 32), b, c},
                                     {std::uint32_t(seed), std::uint32_t(seed >> 32) ^ 0x696d67u});
  const double u1 = (double(r[0]) + 1.0) / 4294967296.0, u2 = double(r[1]) / 4294967296.0;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

constexpr float kNoise = 0.8f;  // per-pixel noise std next to patterns of std about 1

}  // namespace

void write_image_file(const std::string& path, const ImageShape& s, const std::vector<std::uint32_t>& labels,
                      const std::vector<std::uint8_t>& pixels) {
  TIDAL_ASSERT(pixels.size() == labels.size() * std::size_t(s.channels * s.height * s.width), "image file sizes");
  io::AtomicFile out(path);
  out.write(kImageFileMagic, 8);
  const std::uint32_t header[5] = {std::uint32_t(labels.size()), std::uint32_t(s.channels), std::uint32_t(s.height),
                                   std::uint32_t(s.width), std::uint32_t(s.num_classes)};
  out.write(header, sizeof header);
  out.write(labels.data(), labels.size() * 4);
  out.write(pixels.data(), pixels.size());
  out.commit();
}

ImageDataset::ImageDataset(const std::string& path, const ImageShape& expected, std::uint64_t seed)
    : shape_(expected), seed_(seed), path_(path) {
  std::ifstream in(path, std::ios::binary);
  TIDAL_CHECK(in.good(), "cannot open data.path '{}'", path);
  char magic[8];
  std::uint32_t h[5];
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(h), sizeof h);
  TIDAL_CHECK(in.good() && std::memcmp(magic, kImageFileMagic, 8) == 0, "data.path '{}' is not a tidal image file", path);
  TIDAL_CHECK(h[1] == expected.channels && h[2] == expected.height && h[3] == expected.width &&
                  h[4] == expected.num_classes,
              "data.path '{}' holds {}x{}x{} images in {} classes; the model expects {}x{}x{} in {} "
              "(model.channels, model.image_size, model.num_classes)",
              path, h[1], h[2], h[3], h[4], expected.channels, expected.height, expected.width, expected.num_classes);
  // The header's count against the file's size, before anything is allocated for it (the shape
  // matched the model's above, so the product cannot overflow).
  const std::uint64_t per_image = 4 + std::uint64_t(h[1]) * h[2] * h[3];
  const std::uint64_t bytes = std::filesystem::file_size(path);
  TIDAL_CHECK(bytes == 8 + sizeof h + std::uint64_t(h[0]) * per_image,
              "data.path '{}' is {} bytes, and its header promises {} images of {} bytes (a label and the pixels) "
              "after {} bytes of header: the file is truncated or not a tidal image file",
              path, bytes, h[0], per_image, 8 + sizeof h);
  labels_.resize(h[0]);
  pixels_.resize(std::size_t(h[0]) * h[1] * h[2] * h[3]);
  in.read(reinterpret_cast<char*>(labels_.data()), std::streamsize(labels_.size() * 4));
  in.read(reinterpret_cast<char*>(pixels_.data()), std::streamsize(pixels_.size()));
  TIDAL_CHECK(in.good(), "data.path '{}' is truncated", path);
  for (std::uint32_t l : labels_) TIDAL_CHECK(l < h[4], "data.path '{}': label {} is not below {} classes", path, l, h[4]);
  TIDAL_CHECK(labels_.size() >= 2, "data.path '{}' needs at least 2 images", path);
  eval_count_ = std::max<std::int64_t>(1, std::int64_t(labels_.size()) / 20);
  train_count_ = std::int64_t(labels_.size()) - eval_count_;
}

ImageDataset::ImageDataset(const ImageShape& shape, std::uint64_t seed) : shape_(shape), seed_(seed) {
  // Smooth patterns: noise averaged over 3x3 neighbourhoods, rescaled to unit std.
  const std::int64_t C = shape.channels, H = shape.height, W = shape.width;
  patterns_.resize(std::size_t(shape.num_classes * C * H * W));
  for (std::int64_t k = 0; k < shape.num_classes; ++k)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t y = 0; y < H; ++y)
        for (std::int64_t x = 0; x < W; ++x) {
          float s = 0;
          for (std::int64_t dy = -1; dy <= 1; ++dy)
            for (std::int64_t dx = -1; dx <= 1; ++dx) {
              const std::int64_t yy = (y + dy + H) % H, xx = (x + dx + W) % W;
              s += normal(std::uint64_t((k * C + c) * H + yy) * std::uint64_t(W) + std::uint64_t(xx), 0, 7, seed);
            }
          patterns_[std::size_t(((k * C + c) * H + y) * W + x)] = s / 3.0f;
        }
}

void ImageDataset::sample(std::int64_t index, Split split, float* image, std::int32_t* label) const {
  const std::int64_t n = shape_.channels * shape_.height * shape_.width;
  if (!patterns_.empty()) {
    const std::uint32_t stream = split == Split::train ? 1 : 2;
    const PhiloxCounter r = philox4x32({std::uint32_t(index), std::uint32_t(std::uint64_t(index) >> 32), stream, 9},
                                       {std::uint32_t(seed_), 0x6c61626cu});
    const std::int64_t k = std::int64_t(r[0] % std::uint32_t(shape_.num_classes));
    *label = std::int32_t(k);
    for (std::int64_t i = 0; i < n; ++i)
      image[i] = patterns_[std::size_t(k * n + i)] + kNoise * normal(std::uint64_t(index), std::uint32_t(i), stream, seed_);
    return;
  }
  // File: the eval split is the last 1/20; training visits the rest in a seeded order.
  std::int64_t j;
  if (split == Split::train) {
    j = training_sample(index, train_count_, seed_);
  } else {
    j = train_count_ + index % eval_count_;
  }
  *label = std::int32_t(labels_[std::size_t(j)]);
  const std::uint8_t* px = pixels_.data() + j * n;
  for (std::int64_t i = 0; i < n; ++i) image[i] = float(px[i]) / 127.5f - 1.0f;
}

nn::Batch ImageDataset::batch(std::int64_t first, std::int64_t count, Split split) const {
  nn::Batch b{.images = Tensor::empty({count, shape_.channels, shape_.height, shape_.width}),
              .targets = Tensor::empty({count}, DType::i32)};
  const std::int64_t n = shape_.channels * shape_.height * shape_.width;
  for (std::int64_t i = 0; i < count; ++i)
    sample(first + i, split, b.images.data<float>() + i * n, b.targets.data<std::int32_t>() + i);
  return b;
}

std::string ImageDataset::describe() const {
  if (patterns_.empty())
    return fmt::format("{}: {} images {}x{}x{} in {} classes ({} held out)", path_, labels_.size(), shape_.channels,
                       shape_.height, shape_.width, shape_.num_classes, eval_count_);
  return fmt::format("synthetic images {}x{}x{}: {} classes, each a fixed smooth pattern plus noise (std {})",
                     shape_.channels, shape_.height, shape_.width, shape_.num_classes, kNoise);
}

}  // namespace tidal::data
