// Labelled images for ViT. From a file (data.path): the header "TIDALIMG", then u32 count,
// channels, height, width, num_classes, then count u32 labels, then count x C x H x W u8 pixels
// (scaled to [-1, 1] when read). Without a file: a synthetic learnable task where each class
// has a fixed smooth random pattern and every sample is its class's pattern plus noise.
#pragma once

#include "data/dataset.h"

#include <string>
#include <vector>

namespace tidal::data {

inline constexpr char kImageFileMagic[8] = {'T', 'I', 'D', 'A', 'L', 'I', 'M', 'G'};

struct ImageShape {
  std::int64_t channels, height, width, num_classes;
};

void write_image_file(const std::string& path, const ImageShape& shape, const std::vector<std::uint32_t>& labels,
                      const std::vector<std::uint8_t>& pixels);

class ImageDataset final : public Dataset {
 public:
  // From a file; its shape must equal `expected`.
  ImageDataset(const std::string& path, const ImageShape& expected, std::uint64_t seed);
  // Synthetic.
  ImageDataset(const ImageShape& shape, std::uint64_t seed);

  nn::Batch batch(std::int64_t first, std::int64_t count, Split split) const override;
  std::string describe() const override;

 private:
  void sample(std::int64_t index, Split split, float* image, std::int32_t* label) const;

  ImageShape shape_;
  std::uint64_t seed_;
  std::string path_;
  std::vector<std::uint32_t> labels_;   // file
  std::vector<std::uint8_t> pixels_;    // file
  std::int64_t train_count_ = 0, eval_count_ = 0;
  std::vector<float> patterns_;         // synthetic: [classes, C, H, W]
};

}  // namespace tidal::data
