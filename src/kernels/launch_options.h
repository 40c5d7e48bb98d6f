// How a decode-path kernel is launched (host side of kernels/pdl.cuh).
#pragma once

namespace vpod::kernels {

// pdl: programmatic dependent launch (the kernel may start while the
// previous one on the stream runs; it waits for it before touching
// activations; the GEMV prefetches its first weights into L2 before
// waiting). pdl_early_trigger: the next kernel may launch as soon as every
// CTA of this one has started (else once each CTA finished its main work).
struct LaunchOptions {
  bool pdl = false;
  bool pdl_early_trigger = false;
};

}  // namespace vpod::kernels
