// The CUDA backend's step-graph key (model/cuda_graph_cache.h): two steps share
// a recorded graph only if every launch parameter the graph bakes in agrees.
// Host code only; runs without a GPU.
#include <gtest/gtest.h>

#include "kernels/attention/attention.h"
#include "model/cuda_graph_cache.h"

namespace vpod::model {
namespace {

HybridBatch decodes(int n, int context) {
  HybridBatch b;
  for (int i = 0; i < n; ++i) {
    b.decodes.push_back({.slot = i, .cached_len = context, .num_new = 1, .token_offset = i});
    b.token_ids.push_back(1);
    b.positions.push_back(context);
  }
  return b;
}

TEST(StepGraphKey, NamesEveryLaunchParameter) {
  StepTensors step;
  step.num_tokens = step.num_sequences = step.num_logit_rows = 4;
  StepPlan plan;
  plan.ready = true;  // planned, no kernels' plan (the simple kernel)
  const StepGraphKey simple = make_step_graph_key(step, plan, 7);
  EXPECT_EQ(simple, make_step_graph_key(step, plan, 7));
  EXPECT_EQ(simple.prefill_items, -1);
  EXPECT_EQ(simple.pod_grid, -1);
  EXPECT_NE(simple, make_step_graph_key(step, plan, 8));  // other weights or KV views
  StepTensors more = step;
  more.num_tokens = more.num_sequences = more.num_logit_rows = 5;
  EXPECT_NE(simple, make_step_graph_key(more, plan, 7));

  // A serial plan: its work-list sizes are part of the key.
  const HybridBatch batch = decodes(4, 3000);
  const Status built = plan.serial.build(batch, {8, 2, 128, DType::bf16}, {.num_sms = 132});
  ASSERT_TRUE(built.ok()) << built.to_string();
  plan.kind = StepPlan::Kind::serial;
  const StepGraphKey planned = make_step_graph_key(step, plan, 7);
  EXPECT_EQ(planned.decode_items, static_cast<int>(plan.serial.decode_items().size()));
  EXPECT_EQ(planned.decode_combines, static_cast<int>(plan.serial.decode_combines().size()));
  EXPECT_EQ(planned.partial_rows, plan.serial.partial_rows());
  EXPECT_NE(planned, simple);
  // A plan not made for this step does not count.
  plan.ready = false;
  EXPECT_EQ(make_step_graph_key(step, plan, 7).decode_items, -1);
}

}  // namespace
}  // namespace vpod::model
