// HfWeightSource's range reads (core/src/hf/hf_weights.h), which fsdp's import uses to read each
// rank's shard straight from the file: any [begin, end) of any parameter equals the same
// elements of the whole tensor, read into ddpd's layout and dtype, bitwise. The whole tensor's
// reference is computed here independently: transformers' q/k rows moved into ddpd's interleaved
// RoPE layout by a reshape and transpose, and the stored dtype converted by torch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "ddpd/common/job_options.h"
#include "ddpd/core/model.h"
#include "hf/hf_weights.h"
#include "hf/safetensors.h"

namespace ddpd {
namespace {

namespace fs = std::filesystem;

// 3 query heads of width 6 over 1 KV head, q/k/v biases, an untied head: every kind of row.
ModelConfig small_config() {
  ModelConfig c;
  c.vocab_size = 13;
  c.d_model = 12;
  c.d_ff = 10;
  c.num_layers = 1;
  c.num_heads = 3;
  c.num_kv_heads = 1;
  c.head_dim = 6;
  c.qkv_bias = true;
  return c;
}

// transformers' half-split rows of each head, in ddpd's interleaved order: HF row j·(w/2) + p of
// a head is ddpd's row 2p + j.
torch::Tensor interleaved(const torch::Tensor& hf_rows, int64_t heads) {
  std::vector<int64_t> split = {heads, 2, hf_rows.size(0) / heads / 2};
  for (int64_t d = 1; d < hf_rows.dim(); ++d) split.push_back(hf_rows.size(d));
  return hf_rows.reshape(split).transpose(1, 2).reshape(hf_rows.sizes()).contiguous();
}

class HfWeightSourceTest : public ::testing::TestWithParam<torch::ScalarType> {
 protected:
  // Writes every tensor of small_config()'s model, random, in the parameter's stored dtype, and
  // keeps what ddpd's float32 parameter must hold.
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hf-weight-source-" + c10::toString(GetParam());
    fs::create_directories(dir_);
    torch::manual_seed(7);
    TransformerLM model(config_);
    std::vector<hf::TensorToWrite> tensors;
    for (const auto& name : detail::hf_tensor_names(config_)) {
      const auto shape = model->named_parameters()[name.ddpd].sizes().vec();
      torch::Tensor stored = torch::randn(shape).to(GetParam()).contiguous();
      stored_.push_back(stored);
      const torch::Tensor value = stored.to(torch::kFloat32);
      expected_[name.ddpd] = name.rope_heads > 0 ? interleaved(value, name.rope_heads) : value;
      shapes_.emplace_back(name.ddpd, shape);
      const auto dtype = GetParam() == torch::kBFloat16  ? hf::StDtype::kBF16
                         : GetParam() == torch::kFloat16 ? hf::StDtype::kF16
                                                         : hf::StDtype::kF32;
      tensors.push_back(
          {name.hf, dtype, shape, stored.data_ptr(), static_cast<size_t>(stored.nbytes())});
    }
    hf::write_safetensors(dir_ + "/model.safetensors", tensors, {{"format", "pt"}});
  }

  ModelConfig config_ = small_config();
  std::string dir_;
  std::vector<torch::Tensor> stored_;
  std::map<std::string, torch::Tensor> expected_;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes_;
};

// Every range a shard of 1 to 7 ranks would read, including ranges that start and end inside a
// row of a q or k projection.
TEST_P(HfWeightSourceTest, EveryShardRangeEqualsThoseElementsOfTheWholeTensor) {
  const detail::HfWeightSource source(dir_, config_, shapes_);
  int ranges = 0;
  for (const auto& [name, whole] : expected_) {
    const torch::Tensor flat = whole.reshape(-1);
    for (int64_t world = 1; world <= 7; ++world) {
      const int64_t shard = (flat.numel() + world - 1) / world;
      for (int64_t r = 0; r < world; ++r) {
        const int64_t begin = std::min(r * shard, flat.numel());
        const int64_t end = std::min(begin + shard, flat.numel());
        torch::Tensor out = torch::full({end - begin}, -1.0f);
        source.read(name, begin, end, out);
        ASSERT_TRUE(torch::equal(out, flat.slice(0, begin, end)))
            << name << " [" << begin << ", " << end << ")";
        ++ranges;
      }
    }
  }
  EXPECT_GT(ranges, 100);
}

TEST_P(HfWeightSourceTest, ARangeOutsideTheTensorIsRefused) {
  const detail::HfWeightSource source(dir_, config_, shapes_);
  torch::Tensor out = torch::empty({2});
  const int64_t numel = expected_.at("blocks.0.q.weight").numel();
  EXPECT_THROW(source.read("blocks.0.q.weight", numel - 1, numel + 1, out), std::invalid_argument);
  EXPECT_THROW(source.read("blocks.0.q.weight", 0, 3, out), std::invalid_argument);
}

// A model whose parameters hold no memory has the shapes, names and dtype of the initialised one.
TEST_P(HfWeightSourceTest, AnUnallocatedModelHasTheShapesAndNoMemory) {
  TransformerLM unallocated(config_, ParameterMemory::kUnallocated);
  for (const auto& [name, shape] : shapes_) {
    const torch::Tensor p = unallocated->named_parameters()[name];
    EXPECT_EQ(p.sizes().vec(), shape) << name;
    EXPECT_EQ(p.storage().nbytes(), 0u) << name;
    EXPECT_EQ(p.scalar_type(), torch::kFloat32) << name;
    EXPECT_TRUE(p.requires_grad()) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(StoredDtypes, HfWeightSourceTest,
                         ::testing::Values(torch::kFloat32, torch::kBFloat16, torch::kFloat16),
                         [](const auto& info) { return std::string(c10::toString(info.param)); });

}  // namespace
}  // namespace ddpd
