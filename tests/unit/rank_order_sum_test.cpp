// The shm transport's fused reduction (core/src/shm/rank_order_sum.h) gives the same bits as the
// Tensor-op sequence it replaced (copy_ of rank 0's term, then add_ of each later rank's), for
// every term count (the streamed loops up to 8 terms, the L1 blocks past them), on counts that
// straddle the vector width and the blocks, with a destination that aliases a term (the all-reduce
// sums into its own tensor).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "shm/rank_order_sum.h"

namespace ddpd::shm {
namespace {

at::Tensor tensor_op_sum(const std::vector<at::Tensor>& terms) {
  at::Tensor result = terms[0].clone();
  for (size_t r = 1; r < terms.size(); ++r) result.add_(terms[r]);
  return result;
}

class RankOrderSum : public ::testing::TestWithParam<std::tuple<int, c10::ScalarType>> {};

TEST_P(RankOrderSum, MatchesTheTensorOpSequenceBitForBit) {
  const auto [world, dtype] = GetParam();
  at::manual_seed(world);
  for (const int64_t count :
       {int64_t{1}, int64_t{7}, int64_t{2047}, int64_t{2048}, int64_t{10'001}}) {
    std::vector<at::Tensor> terms;
    // Magnitudes spread over 2^±20, so the order of the additions changes the rounding.
    for (int r = 0; r < world; ++r) {
      terms.push_back(at::randn({count}, at::TensorOptions().dtype(dtype)) *
                      at::exp2(at::randint(-20, 20, {count}).to(dtype)));
    }
    const at::Tensor expected = tensor_op_sum(terms);
    // A rank sums into its own term, as the all-reduce does: the first rank's and the last's,
    // alone and with a second destination (the private path's slot).
    for (const int own_rank : {0, world - 1}) {
      for (const bool second_destination : {false, true}) {
        at::Tensor own = terms[own_rank].clone();
        std::vector<const void*> pointers;
        for (int r = 0; r < world; ++r)
          pointers.push_back(r == own_rank ? own.data_ptr() : terms[r].data_ptr());
        at::Tensor copy = at::zeros_like(own);
        std::vector<void*> outs{own.data_ptr()};
        if (second_destination) outs.push_back(copy.data_ptr());
        ASSERT_TRUE(sum_in_rank_order(pointers, count, dtype, outs));
        const std::string where = "world " + std::to_string(world) + ", count " +
                                  std::to_string(count) + ", into rank " +
                                  std::to_string(own_rank) + "'s term";
        EXPECT_TRUE(at::equal(own, expected)) << where;
        if (second_destination) EXPECT_TRUE(at::equal(copy, expected)) << where;
      }
    }
    // The shared all-reduce writes the sum back into every term.
    std::vector<at::Tensor> buffers;
    std::vector<const void*> pointers;
    std::vector<void*> outs;
    for (const auto& term : terms) {
      buffers.push_back(term.clone());
      pointers.push_back(buffers.back().data_ptr());
      outs.push_back(buffers.back().data_ptr());
    }
    ASSERT_TRUE(sum_in_rank_order(pointers, count, dtype, outs));
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(at::equal(buffers[r], expected))
          << "world " << world << ", count " << count << ", every term, rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldsAndDtypes, RankOrderSum,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 6, 8, 9),
                                            ::testing::Values(at::kFloat, at::kDouble)));

TEST(RankOrderSumFallback, RefusesHalfPrecisionWithoutWriting) {
  // bfloat16 rounds after every add; the caller keeps the Tensor ops for it.
  at::Tensor a = at::ones({4}, at::kBFloat16);
  at::Tensor out = at::zeros({4}, at::kBFloat16);
  EXPECT_FALSE(sum_in_rank_order({a.data_ptr(), a.data_ptr()}, 4, at::kBFloat16, {out.data_ptr()}));
  EXPECT_EQ(out.sum().item<float>(), 0.0f);
}

TEST(RankOrderSumFallback, RefusesThreeDestinationsThatAreNotTheTerms) {
  at::Tensor a = at::ones({4});
  std::vector<at::Tensor> outs{at::zeros({4}), at::zeros({4}), at::zeros({4})};
  EXPECT_FALSE(sum_in_rank_order({a.data_ptr(), a.data_ptr(), a.data_ptr()}, 4, at::kFloat,
                                 {outs[0].data_ptr(), outs[1].data_ptr(), outs[2].data_ptr()}));
  for (const auto& out : outs) EXPECT_EQ(out.sum().item<float>(), 0.0f);
}

}  // namespace
}  // namespace ddpd::shm
