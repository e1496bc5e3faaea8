// An image file (TIDALIMG header, labels, u8 pixels) against the shape a config expects: loaded,
// then a batch of training and of eval images read.
#include "data/images.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tidal::data;
  const std::string path = tidal::fuzz::write_input(data, size, "images.bin");
  return tidal::fuzz::expect_clean([&] {
    const ImageDataset d(path, ImageShape{1, 2, 2, 3}, 1);
    d.batch(0, 2, Split::train);
    d.batch(0, 1, Split::eval);
  });
}
