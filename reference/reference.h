// Backend 1: naive attention in Eigen, the readable truth. It materializes
// S = scale * Q K^T for every (sequence, head) on purpose, exactly as the slow
// frameworks do, then softmax and S V. f32 math; bf16 inputs are widened.
#ifndef ATTNKIT_REFERENCE_REFERENCE_H_
#define ATTNKIT_REFERENCE_REFERENCE_H_

#include <memory>

#include "runtime/backend.h"
#include "runtime/problem.h"
#include "runtime/status.h"

namespace attnkit::reference {

Status Attention(const AttentionProblem& p, const AttentionArgs& args);

std::unique_ptr<Backend> MakeReferenceBackend();

}  // namespace attnkit::reference

#endif  // ATTNKIT_REFERENCE_REFERENCE_H_
