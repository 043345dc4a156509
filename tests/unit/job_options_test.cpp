#include <gtest/gtest.h>

#include <limits>

#include "ddpd/common/comm_options.h"
#include "ddpd/common/fault_injection.h"
#include "ddpd/common/incident_kind.h"
#include "ddpd/common/job_options.h"

namespace ddpd {
namespace {

std::string flag_of_error(const DdpJobOptions& o, int world) {
  try {
    validate(o, world);
  } catch (const OptionError& e) {
    return e.flag();
  }
  return "";
}

TEST(JobOptions, DefaultsAreValid) { EXPECT_NO_THROW(validate(DdpJobOptions{}, 2)); }

TEST(JobOptions, BadValuesNameTheirFlag) {
  DdpJobOptions o;
  o.model = "huge";
  EXPECT_EQ(flag_of_error(o, 1), "--model");
  o = {};
  o.batch_size = 9;
  EXPECT_EQ(flag_of_error(o, 2), "--batch");
  EXPECT_EQ(flag_of_error(o, 3), "");
  o = {};
  o.bucket_size_mb = 0;
  EXPECT_EQ(flag_of_error(o, 1), "--bucket-mb");
  o.bucket_size_mb = -1;
  EXPECT_EQ(flag_of_error(o, 1), "--bucket-mb");
  o = {};
  o.steps = -1;  // 0 is accepted: evaluate and export only
  EXPECT_EQ(flag_of_error(o, 1), "--steps");
  o = {};
  o.num_heads = 3;  // 64 does not divide by 3
  EXPECT_EQ(flag_of_error(o, 1), "--heads");
  o = {};
  o.strategy = Strategy::kFsdp;
  o.shard_optimizer = true;
  EXPECT_EQ(flag_of_error(o, 2), "--shard-optimizer");
  o = {};
  o.shard_replicas = 1;  // without --shard-optimizer or fsdp: nothing to copy
  EXPECT_EQ(flag_of_error(o, 2), "--shard-replicas");
  o.strategy = Strategy::kFsdp;  // fsdp's shards
  EXPECT_EQ(flag_of_error(o, 2), "");
  o.strategy = Strategy::kBucketed;
  o.shard_optimizer = true;
  EXPECT_EQ(flag_of_error(o, 2), "");
  o.shard_replicas = 2;
  EXPECT_EQ(flag_of_error(o, 2), "--shard-replicas");
  o = {};
  o.min_lr = 1.0;  // above --lr
  EXPECT_EQ(flag_of_error(o, 1), "--min-lr");
  o = {};
  o.clip_grad_norm = -1;
  EXPECT_EQ(flag_of_error(o, 1), "--clip-grad-norm");
  o = {};
  o.checkpoint_every = 2;  // without --checkpoint-dir
  EXPECT_EQ(flag_of_error(o, 1), "--checkpoint-every");
  o = {};
  o.min_world_size = 3;
  EXPECT_EQ(flag_of_error(o, 2), "--min-world-size");
  o = {};
  o.fsdp_prefetch = 3;
  EXPECT_EQ(flag_of_error(o, 2), "--fsdp-prefetch");
  o.fsdp_prefetch = -1;
  EXPECT_EQ(flag_of_error(o, 2), "--fsdp-prefetch");
  // A timeout beyond 30 days, or infinite, overflowed into a negative one at rendezvous.
  for (double timeout : {0.0, -1.0, 1e10, std::numeric_limits<double>::infinity(),
                         std::numeric_limits<double>::quiet_NaN()}) {
    o = {};
    o.collective_timeout_s = timeout;
    EXPECT_EQ(flag_of_error(o, 2), "--timeout") << timeout;
  }
  o.collective_timeout_s = kMaxCollectiveTimeoutSeconds;
  EXPECT_EQ(flag_of_error(o, 2), "");
}

// Warm-up from lr / W, then the schedule from lr to --min-lr, reached at the last step.
TEST(JobOptions, LearningRateSchedules) {
  DdpJobOptions o;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.steps = 12;
  o.lr_warmup_steps = 2;
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 0), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 7), 1.0);  // constant
  o.lr_schedule = LrSchedule::kLinear;
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 2), 1.0);
  EXPECT_NEAR(learning_rate_at(o, 7), 0.5, 1e-12);  // 5 of 9 decay steps: 1 - 0.9 * 5 / 9
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 11), 0.1);
  o.lr_schedule = LrSchedule::kCosine;
  EXPECT_DOUBLE_EQ(learning_rate_at(o, 2), 1.0);
  EXPECT_NEAR(learning_rate_at(o, 11), 0.1, 1e-12);
  o.steps = 11;  // 8 decay steps: step 6 is halfway, where the cosine is at the midpoint
  EXPECT_NEAR(learning_rate_at(o, 6), 0.55, 1e-12);
}

TEST(JobOptions, MessageIsOneLineWithTheReason) {
  DdpJobOptions o;
  o.batch_size = 7;
  try {
    validate(o, 2);
    FAIL() << "batch 7 over 2 ranks was accepted";
  } catch (const OptionError& e) {
    EXPECT_STREQ(e.what(), "--batch: global batch 7 is not divisible by world size 2");
  }
}

TEST(JobOptions, OverridesApplyOnTopOfThePreset) {
  DdpJobOptions o;
  o.model = "small";
  o.num_layers = 2;
  o.vocab_size = 512;
  const ModelConfig m = o.resolved_model();
  EXPECT_EQ(m.d_model, 768);
  EXPECT_EQ(m.d_ff, 3072);
  EXPECT_EQ(m.num_layers, 2);
  EXPECT_EQ(m.num_heads, 12);
  EXPECT_EQ(m.vocab_size, 512);
}

TEST(JobOptions, PresetTableMatchesSpec) {
  struct Row {
    const char* name;
    int64_t d, ff, layers, heads;
  };
  for (const Row& r : {Row{"tiny", 64, 256, 2, 4}, Row{"small", 768, 3072, 12, 12},
                       Row{"medium", 1024, 4096, 24, 16}, Row{"large", 1280, 5120, 36, 20},
                       Row{"xl", 1600, 6400, 48, 25}, Row{"2.7B", 2560, 10240, 32, 32}}) {
    const ModelConfig m = model_preset(r.name);
    EXPECT_EQ(m.d_model, r.d) << r.name;
    EXPECT_EQ(m.d_ff, r.ff) << r.name;
    EXPECT_EQ(m.num_layers, r.layers) << r.name;
    EXPECT_EQ(m.num_heads, r.heads) << r.name;
    EXPECT_EQ(m.vocab_size, 10000) << r.name;
  }
}

TEST(JobOptions, ParameterCountOfSmallIsThePeers) {
  EXPECT_EQ(count_parameters(model_preset("small")), 128625408);
}

}  // namespace
TEST(FaultInjection, ParsesEveryKindAndRefusesBadSpecsByFlag) {
  const auto hang = parse_fault_injection("hang:rank=1,step=3,seconds=2.5", 3);
  ASSERT_TRUE(hang.has_value());
  EXPECT_EQ(hang->kind, FaultKind::kHang);
  EXPECT_EQ(hang->rank, 1);
  EXPECT_EQ(hang->step, 3);
  EXPECT_DOUBLE_EQ(hang->seconds, 2.5);
  EXPECT_EQ(to_string(*hang), "hang:rank=1,step=3,seconds=2.5");
  EXPECT_EQ(to_string(*parse_fault_injection("slow:step=20,rank=2,factor=3")),
            "slow:rank=2,step=20,factor=3");
  EXPECT_FALSE(parse_fault_injection("").has_value());
  for (const std::string bad :
       {"hang", "boom:rank=0,step=1", "hang:rank=0", "hang:rank=x,step=1", "hang:rank=0,step=-1",
        "exit:rank=0,step=1,seconds=3", "slow:rank=0,step=1", "hang:rank=0,step=1,colour=2",
        "hang:rank=3,step=1"}) {
    try {
      parse_fault_injection(bad, 3);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const OptionError& e) {
      EXPECT_EQ(e.flag(), "--inject") << bad;
    }
  }
  DdpJobOptions o;
  o.on_stall = OnStall::kWarn;
  o.stall_seconds = -1;
  EXPECT_THROW(validate(o, 2), OptionError);
}

// A drill whose fault can never fire would pass without testing anything: exit-during-heal is
// refused on a job that never heals.
TEST(FaultInjection, ExitDuringHealNeedsAJobThatMayHeal) {
  DdpJobOptions o;
  o.inject = "exit-during-heal:rank=0,step=2";
  try {
    validate(o, 2);
    ADD_FAILURE() << "accepted without --max-restarts";
  } catch (const OptionError& e) {
    EXPECT_EQ(e.flag(), "--inject");
    EXPECT_NE(std::string(e.what()).find("--max-restarts"), std::string::npos) << e.what();
  }
  o.max_restarts = 1;
  EXPECT_NO_THROW(validate(o, 2));
  o.no_heal = true;
  EXPECT_THROW(validate(o, 2), OptionError);
}

}  // namespace ddpd

namespace ddpd {
namespace {}  // namespace
// Every enum of the job model: each name parses back to its value, and an unknown name (or '')
// is refused naming the enum's flag and its choices.
template <typename E>
void check_enum_names(size_t count) {
  const auto& names = EnumInfo<E>::names();
  ASSERT_EQ(names.size(), count) << EnumInfo<E>::kFlag;
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ(parse_enum<E>(names[i]), static_cast<E>(i));
    EXPECT_EQ(enum_name(static_cast<E>(i)), names[i]);
  }
  for (const std::string& bad : std::vector<std::string>{"", "panic", names[0] + " "}) {
    try {
      parse_enum<E>(bad);
      ADD_FAILURE() << EnumInfo<E>::kFlag << " accepted '" << bad << "'";
    } catch (const OptionError& e) {
      EXPECT_EQ(e.flag(), EnumInfo<E>::kFlag);
      EXPECT_NE(std::string(e.what()).find("must be " + choices_text(names)), std::string::npos)
          << e.what();
    }
  }
}

TEST(JobEnums, NamesRoundTripAndUnknownNamesNameTheFlag) {
  check_enum_names<Strategy>(5);
  check_enum_names<Precision>(2);
  check_enum_names<Attention>(4);
  check_enum_names<Device>(2);
  check_enum_names<TokenDtype>(2);
  check_enum_names<OnStall>(2);
  check_enum_names<LrSchedule>(3);
  check_enum_names<GradCompression>(3);
  check_enum_names<FsdpUnits>(2);
  check_enum_names<Transport>(3);
  check_enum_names<GroupTransport>(4);
  check_enum_names<Backend>(2);
  check_enum_names<Collective>(4);
  check_enum_names<CommDtype>(2);
  check_enum_names<CommSeries>(5);
  check_enum_names<FaultKind>(7);
  check_enum_names<IncidentKind>(9);
  EXPECT_EQ(series_of(Collective::kReduceScatter), CommSeries::kReduceScatter);
  EXPECT_EQ(choices_text({"a", "b", "c"}), "a, b or c");
}

// --attention auto (the default) is sdpa on CUDA, what a GPU user of PyTorch gets, and naive on
// CPU; a named attention stays itself on either device, and the model runs what was resolved.
TEST(JobEnums, AutoAttentionResolvesByDevice) {
  DdpJobOptions job;
  EXPECT_EQ(job.attention, Attention::kAuto);
  EXPECT_EQ(job.resolved_attention(), Attention::kNaive);
  EXPECT_EQ(job.resolved_model().attention, Attention::kNaive);
  job.device = Device::kCuda;
  EXPECT_EQ(job.resolved_attention(), Attention::kSdpa);
  EXPECT_EQ(job.resolved_model().attention, Attention::kSdpa);
  job.attention = Attention::kFlash;
  EXPECT_EQ(job.resolved_attention(), Attention::kFlash);
  job.device = Device::kCpu;
  job.attention = Attention::kSdpa;
  EXPECT_EQ(job.resolved_model().attention, Attention::kSdpa);
}

}  // namespace ddpd
