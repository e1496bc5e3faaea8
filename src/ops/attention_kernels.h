// Which kernels compute attention on a GPU (train.attention): cuDNN's fused flash attention where
// it serves the case (bf16 / fp16, no key padding mask, a head width and shape cuDNN supports, the
// library present) and tidal's own flash kernels elsewhere (automatic); cuDNN or an error naming
// why not (cudnn); tidal's own always (own: the fallback, and the oracle cuDNN is checked
// against). The CPU has one kind.
#pragma once

namespace tidal::ops {

enum class AttentionKernels { automatic, cudnn, own };

}  // namespace tidal::ops
