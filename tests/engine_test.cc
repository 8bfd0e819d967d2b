#include "common/engine/engine.h"
#include "common/model/cache_layout.h"
#include "common/kernels/bf16_matmul.h"
#include "common/kernels/gemm_dnnl.h"
#include "common/model/checkpoint.h"
#include "common/kernels/gemv_bf16dot.h"
#include "common/kernels/gemv_kernels.h"
#include "common/kernels/gemv_q8.h"
#include "common/kernels/kmajor_packs.h"
#include "common/kernels/linear_int8.h"
#include "common/model/transformer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include "tests/bf16_mode_util.h"
#include "tests/test_util.h"

namespace pdserve {
namespace {

// 20-token prompt, window 8: the rings wrap during prefill and decode.
std::vector<int64_t> Prompt(int64_t n = 20, int64_t salt = 0) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back((i * 37 + 11 + salt * 101) % 300);
  return p;
}

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { engine_ = Engine::FromWeights(RandomWeights(testing::TinyConfig(), 42)).release(); }
  static void TearDownTestSuite() { delete engine_; }
  static Engine* engine_;
};
Engine* EngineTest::engine_ = nullptr;

std::vector<int64_t> GenerateIds(const Engine& e, SamplingParams sp, bool cache, int64_t n = 72) {
  GenerateRequest r;
  r.prompt = Prompt();
  r.max_new_tokens = n;
  r.sampling = sp;
  r.use_cache = cache;
  auto out = e.Generate(r);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<int64_t>{};
}

// --num-threads changes how fast, never what: the logits and tokens of an
// engine on one thread equal those of one on several (each kernel's
// reduction order must not depend on the split). The count is
// process-wide, so the test restores the default.
TEST_F(EngineTest, ThreadCountDoesNotChangeTheOutput) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<at::Tensor> logits;
  std::vector<std::vector<int64_t>> tokens;
  for (int threads : {1, std::max(2, cores)}) {
    EngineOptions o;
    o.num_threads = threads;
    auto engine = Engine::FromWeights(engine_->model().weights(), o);
    EXPECT_EQ(at::get_num_threads(), threads);
    auto seq = engine->NewSequence();
    auto l = engine->Prefill(seq.get(), Prompt(23), 7);
    ASSERT_TRUE(l.ok()) << l.status();
    logits.push_back(*l);
    tokens.push_back(GenerateIds(*engine, SamplingParams{0.8f, 0.9f, 0, 17}, true, 32));
  }
  ConfigureThreads(0);  // back to the default
  EXPECT_TRUE(at::allclose(logits[0], logits[1], 1e-5, 1e-6))
      << "max diff " << (logits[0] - logits[1]).abs().max().item<float>();
  ASSERT_EQ(tokens[0].size(), 32u);
  EXPECT_EQ(tokens[0], tokens[1]);
}

// --threads 0 takes OMP_NUM_THREADS when it is a positive count (the k8s
// manifests and the TSan job set it), else every core.
TEST_F(EngineTest, ZeroThreadsFollowsOmpNumThreads) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const char* was = std::getenv("OMP_NUM_THREADS");
  const std::string saved = was != nullptr ? was : "";
  setenv("OMP_NUM_THREADS", "3", 1);
  EXPECT_EQ(ConfigureThreads(0), 3);
  EXPECT_EQ(ConfigureThreads(1), 1);  // an explicit count wins
  setenv("OMP_NUM_THREADS", "lots", 1);
  EXPECT_EQ(ConfigureThreads(0), cores);
  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(ConfigureThreads(0), cores);
  if (was != nullptr) setenv("OMP_NUM_THREADS", saved.c_str(), 1);
  ConfigureThreads(0);
}

// Threads in this process (/proc/self/task).
int ProcessThreads() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

// at::set_num_threads rebuilds caffe2's pthreadpool, and LibTorch calls it
// again on every thread's first parallel op. LibTorch must see engine.cc's
// pthreadpool_create (no pool, so no spinning workers), and the intra-op
// count must still reach new threads.
TEST_F(EngineTest, NewThreadsTakeTheCountWithoutAPthreadpool) {
  void* create = dlsym(RTLD_DEFAULT, "pthreadpool_create");
  Dl_info where{};
  ASSERT_NE(create, nullptr);
  ASSERT_NE(dladdr(create, &where), 0);
  EXPECT_EQ(std::string(where.dli_fname).find("pthreadpool"), std::string::npos)
      << "LibTorch calls " << where.dli_fname << "'s pthreadpool_create, not engine.cc's";
  ConfigureThreads(1);
  const int before = ProcessThreads();
  ConfigureThreads(3);  // libpthreadpool's pool would start 2 workers here
  EXPECT_EQ(ProcessThreads(), before);
  ConfigureThreads(2);
  for (int i = 0; i < 3; ++i) {
    int threads = 0;
    bool copied = false;
    std::thread t([&] {
      at::Tensor a = at::arange(1 << 20, at::kFloat), b = at::empty_like(a);
      b.copy_(a);  // a parallel op: the lazy init runs here
      threads = at::get_num_threads();
      copied = at::equal(a, b);
    });
    t.join();
    EXPECT_EQ(threads, 2);
    EXPECT_TRUE(copied);
  }
  ConfigureThreads(0);
}

TEST_F(EngineTest, CachedEqualsNoCacheGreedy) {
  auto cached = GenerateIds(*engine_, {}, true);
  ASSERT_EQ(cached.size(), 72u);
  EXPECT_EQ(cached, GenerateIds(*engine_, {}, false));
  // Not degenerate: a random model still produces varied tokens.
  EXPECT_GT(std::set<int64_t>(cached.begin(), cached.end()).size(), 10u);
}

TEST_F(EngineTest, CachedEqualsNoCacheSeededSampling) {
  for (SamplingParams sp : {SamplingParams{0.9f, 0.95f, 40, 3}, SamplingParams{1.0f, 1.0f, 0, 12345},
                            SamplingParams{0.7f, 0.5f, 0, 9}}) {
    auto cached = GenerateIds(*engine_, sp, true);
    EXPECT_EQ(cached, GenerateIds(*engine_, sp, false)) << "temperature " << sp.temperature;
    // Same seed, same tokens; another seed, other tokens.
    EXPECT_EQ(cached, GenerateIds(*engine_, sp, true));
    SamplingParams other = sp;
    other.seed += 1;
    EXPECT_NE(cached, GenerateIds(*engine_, other, true));
  }
}

// SampleRows spreads a batch's rows over the threads; each row must draw
// what Sample draws from it alone, with its own params and n.
TEST_F(EngineTest, SampleRowsDrawsWhatSampleDrawsPerRow) {
  const int64_t B = 6, V = engine_->config().vocab_size;
  const at::Tensor logits = at::randn({B, V}, at::TensorOptions().dtype(at::kFloat)) * 3;
  std::vector<SamplingParams> params = {SamplingParams{}, SamplingParams{1.0f, 1.0f, 0, 1},
                                        SamplingParams{0.7f, 0.9f, 0, 2}, SamplingParams{0.9f, 1.0f, 40, 3},
                                        SamplingParams{}, SamplingParams{1.3f, 0.5f, 0, 4}};
  const std::vector<uint64_t> n = {0, 5, 1, 7, 3, 2};
  const std::vector<int64_t> rows = engine_->SampleRows(logits, params, n);
  ASSERT_EQ(rows.size(), static_cast<size_t>(B));
  for (int64_t r = 0; r < B; ++r) EXPECT_EQ(rows[r], engine_->Sample(logits[r], params[r], n[r])) << "row " << r;
  EXPECT_EQ(rows[0], logits[0].argmax().item<int64_t>());
}

// Chunks of 2 or more tokens take the fused prefill attention, whose bits
// do not depend on the chunk (prefill_attention.h), and every product of
// at most 32 rows the row kernels: a prompt prefilled in such chunks equals
// it prefilled whole, bit for bit. One-token chunks take the decode step's
// attention: equal up to rounding.
TEST_F(EngineTest, ChunkedPrefillMatchesOneShot) {
  const auto prompt = Prompt(23);
  auto whole = engine_->NewSequence();
  auto want = engine_->Prefill(whole.get(), prompt, 1000);
  ASSERT_TRUE(want.ok()) << want.status();
  for (int64_t chunk : {1, 3, 7, 16}) {
    auto seq = engine_->NewSequence();
    auto got = engine_->Prefill(seq.get(), prompt, chunk);
    ASSERT_TRUE(got.ok()) << got.status();
    const bool exact = chunk > 1;
    auto same = [exact](const at::Tensor& a, const at::Tensor& b) {
      return exact ? at::equal(a, b) : at::allclose(a, b, 1e-4, 1e-5);
    };
    EXPECT_TRUE(same(*got, *want)) << "chunk " << chunk << " max diff " << (*got - *want).abs().max().item<float>();
    EXPECT_EQ(seq->pos, 23);
    for (int64_t l = 0; l < 4; ++l) {
      ASSERT_EQ(seq->cache.seq_len(l), whole->cache.seq_len(l));
      EXPECT_TRUE(same(seq->cache.Get(l).first, whole->cache.Get(l).first)) << "chunk " << chunk << " layer " << l;
      EXPECT_TRUE(same(seq->cache.Get(l).second, whole->cache.Get(l).second)) << "chunk " << chunk << " layer " << l;
    }
  }
}

TEST_F(EngineTest, LastLogitsEqualTheNoCacheForward) {
  auto seq = engine_->NewSequence();
  auto cached = engine_->Prefill(seq.get(), Prompt(), 5);
  auto ref = engine_->ForwardNoCache(Prompt());
  ASSERT_TRUE(cached.ok() && ref.ok());
  EXPECT_TRUE(at::allclose(*cached, *ref, 1e-4, 1e-5));
}

std::vector<int64_t> DecodeGreedy(const Engine& e, Sequence* seq, at::Tensor logits, int n) {
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(e.Sample(logits, {}, i));
    auto step = e.DecodeStep({seq}, {out.back()});
    EXPECT_TRUE(step.ok()) << step.status();
    logits = step->select(0, 0);
  }
  return out;
}

TEST_F(EngineTest, ExportImportThenDecodeEqualsDecodingInPlace) {
  for (KvDtype dt : {KvDtype::kF32, KvDtype::kBF16}) {
    EngineOptions o;
    o.kv.dtype = dt;
    auto engine = Engine::FromWeights(engine_->model().weights(), o);
    auto a = engine->NewSequence();
    auto logits = engine->Prefill(a.get(), Prompt());
    ASSERT_TRUE(logits.ok());
    auto state = a->cache.Export(a->pos);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->k[0].size(0), 8);   // windowed: last W rows
    EXPECT_EQ(state->k[1].size(0), 20);  // global: every row
    auto imported = MixedKVCache::Import(CacheLayout(engine->config()), *state, o.kv);
    ASSERT_TRUE(imported.ok()) << imported.status();
    Sequence b(std::move(*imported));
    b.pos = state->prompt_len;
    EXPECT_EQ(DecodeGreedy(*engine, a.get(), *logits, 40), DecodeGreedy(*engine, &b, *logits, 40));
  }
}

// Bit for bit: a sequence's tokens must not depend on which others share
// its decode batch (the decode worker batches whatever is running).
// kB sequences with prompts of different lengths decode 12 steps in one
// batch and one at a time: every row of logits is bit-identical.
void ExpectBatchedDecodeEqualsOneAtATime(const Engine& engine, int kB) {
  std::vector<std::unique_ptr<Sequence>> solo, batch;
  std::vector<int64_t> tokens;
  for (int i = 0; i < kB; ++i) {
    solo.push_back(engine.NewSequence());
    batch.push_back(engine.NewSequence());
    auto prompt = Prompt(2 + (7 * i) % 29, i);
    ASSERT_TRUE(engine.Prefill(solo.back().get(), prompt).ok());
    ASSERT_TRUE(engine.Prefill(batch.back().get(), prompt).ok());
    tokens.push_back(100 + i);
  }
  for (int step = 0; step < 12; ++step) {
    std::vector<Sequence*> all;
    for (auto& b : batch) all.push_back(b.get());
    auto together = engine.DecodeStep(all, tokens);
    ASSERT_TRUE(together.ok()) << together.status();
    for (int i = 0; i < kB; ++i) {
      auto alone = engine.DecodeStep({solo[i].get()}, {tokens[i]});
      ASSERT_TRUE(alone.ok());
      EXPECT_TRUE(at::equal(together->select(0, i), alone->select(0, 0)))
          << "seq " << i << " step " << step << ": max diff "
          << (together->select(0, i) - alone->select(0, 0)).abs().max().item<float>();
      tokens[i] = engine.Sample(alone->select(0, 0), {}, step);
    }
  }
}

TEST_F(EngineTest, BatchedDecodeMatchesOneAtATimeExactly) { ExpectBatchedDecodeEqualsOneAtATime(*engine_, 16); }

// The tiny model with bf16 weights, loaded under the current --bf16-matmul.
std::unique_ptr<Engine> LoadTinyBf16() {
  ModelWeights w = RandomWeights(testing::TinyConfig(), 42);
  ConvertWeights(&w, WeightsDtype::kBF16);
  return Engine::FromWeights(std::move(w));
}

// The last logits of Prompt(len) prefilled into a new sequence.
at::Tensor PrefillLastLogits(const Engine& engine, int64_t len) {
  auto seq = engine.NewSequence();
  auto logits = engine.Prefill(seq.get(), Prompt(len));
  EXPECT_TRUE(logits.ok()) << logits.status();
  return logits.ok() ? *logits : at::Tensor();
}

// --bf16-matmul dot keeps batch invariance: one sequence's MoE runs the
// per-token path (GemvAllRows), a batch the per-matrix one (LinearBf16Dot),
// and both give the same bits. The mode really changes the logits.
TEST(EngineBf16DotTest, BatchedDecodeMatchesOneAtATimeExactly) {
  if (!GemvBf16DotAvailable()) GTEST_SKIP() << "this CPU (or PDSERVE_ISA) has no AVX512_BF16: dot cannot run here";
  const testing::RestoreBf16Matmul restore;
  // Loaded under widen, which keeps the row-major matrices dot reads (the
  // default, kmajor, replaces them with its packs).
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kWiden).ok());
  const std::unique_ptr<Engine> engine = LoadTinyBf16();
  const at::Tensor widened = PrefillLastLogits(*engine, 40);
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kDot).ok());
  EXPECT_FALSE(at::equal(PrefillLastLogits(*engine, 40), widened));
  ExpectBatchedDecodeEqualsOneAtATime(*engine, 6);
}

// --bf16-matmul kmajor: the packs made at load are what decode reads (the
// logits move off widen's in the last bits, not more), and every output is
// one FMA chain over k at any batch size: one sequence alone and in a batch
// of 6 or 17 (past the kernel's 8-row passes) give the same bits, and so
// do prompts prefilled together (up to 32 rows: the decode kernels). The
// packs replace the row-major matrices, and the fingerprint (hashed before
// they went) is widen's: workers in either mode take each other's hand-offs.
TEST(EngineBf16KMajorTest, PacksAreReadAndBatchesKeepTheBits) {
  if (!GemvAvailable()) GTEST_SKIP() << "this CPU has no AVX2+FMA: no decode kernels to read the packs";
  const testing::RestoreBf16Matmul restore;
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kWiden).ok());
  const std::unique_ptr<Engine> widen_engine = LoadTinyBf16();
  const at::Tensor widened = PrefillLastLogits(*widen_engine, 20);
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kKMajor).ok());
  const std::unique_ptr<Engine> engine = LoadTinyBf16();
  ASSERT_NE(engine->model().kmajor_packs(), nullptr);
  EXPECT_TRUE(engine->model().kmajor_packs()->holds_only_copies());
  EXPECT_EQ(engine->model().Fingerprint(), widen_engine->model().Fingerprint());
  const at::Tensor kmajor = PrefillLastLogits(*engine, 20);
  EXPECT_FALSE(at::equal(kmajor, widened));
  EXPECT_TRUE(at::allclose(kmajor, widened, /*rtol=*/1e-4, /*atol=*/1e-4))
      << "max diff " << (kmajor - widened).abs().max().item<float>();
  // Past 32 rows prefill widens the packs for the GEMMs (the only copies now).
  const at::Tensor long_kmajor = PrefillLastLogits(*engine, 70);
  const at::Tensor long_widened = PrefillLastLogits(*widen_engine, 70);
  EXPECT_TRUE(at::allclose(long_kmajor, long_widened, /*rtol=*/1e-4, /*atol=*/1e-4))
      << "max diff " << (long_kmajor - long_widened).abs().max().item<float>();
  ExpectBatchedDecodeEqualsOneAtATime(*engine, 6);
  ExpectBatchedDecodeEqualsOneAtATime(*engine, 17);
}

// Bit for bit: a prompt prefilled as one segment of a batched forward
// leaves the same K/V and last logits as prefilled alone (the prefill
// worker batches whatever is queued, and the decode worker continues from
// those K/V). Prompts of different lengths; the rings wrap in some.
void ExpectBatchedPrefillEqualsAlone(const Engine& engine, const std::vector<int64_t>& lengths) {
  const int kB = static_cast<int>(lengths.size());
  std::vector<std::vector<int64_t>> prompts;
  std::vector<std::unique_ptr<Sequence>> solo, batch;
  std::vector<PrefillJob> jobs;
  for (int i = 0; i < kB; ++i) prompts.push_back(Prompt(lengths[i], i));
  for (int i = 0; i < kB; ++i) {
    batch.push_back(engine.NewSequence());
    jobs.push_back({batch.back().get(), &prompts[i], nullptr});
  }
  auto together = engine.PrefillBatch(jobs);
  ASSERT_EQ(together.size(), static_cast<size_t>(kB));
  for (int i = 0; i < kB; ++i) {
    solo.push_back(engine.NewSequence());
    auto alone = engine.Prefill(solo.back().get(), prompts[i]);
    ASSERT_TRUE(alone.ok()) << alone.status();
    ASSERT_TRUE(together[i].ok()) << i << ": " << together[i].status();
    EXPECT_TRUE(at::equal(*together[i], *alone)) << "prompt " << i << " (" << prompts[i].size() << " tokens): max diff "
                                                 << (*together[i] - *alone).abs().max().item<float>();
    EXPECT_EQ(batch[i]->pos, solo[i]->pos);
    for (int64_t l = 0; l < engine.config().n_layers; ++l) {
      EXPECT_TRUE(at::equal(batch[i]->cache.Get(l).first, solo[i]->cache.Get(l).first)) << i << " layer " << l;
      EXPECT_TRUE(at::equal(batch[i]->cache.Get(l).second, solo[i]->cache.Get(l).second)) << i << " layer " << l;
    }
  }
}

TEST_F(EngineTest, BatchedPrefillMatchesAloneExactly) {
  EXPECT_EQ(engine_->ExactPrefillBatchTokens(), 32);  // fp32 weights: BLAS past 32 rows
  ExpectBatchedPrefillEqualsAlone(*engine_, {1, 12, 9, 2, 5, 1});
}

TEST(EngineBf16Test, BatchedPrefillMatchesAloneExactly) {
  const testing::RestoreBf16Matmul restore;
  // widen keeps the row-major matrices that dot reads below.
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kWiden).ok());
  const std::unique_ptr<Engine> engine = LoadTinyBf16();
  ExpectBatchedPrefillEqualsAlone(*engine, {1, 12, 9, 2, 5, 1});
  if (!GemvBf16DotAvailable()) GTEST_SKIP() << "this CPU (or PDSERVE_ISA) has no AVX512_BF16: dot cannot run here";
  EXPECT_EQ(engine->ExactPrefillBatchTokens(), 32);
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kDot).ok());
  ExpectBatchedPrefillEqualsAlone(*engine, {1, 12, 9, 2, 5, 1});
  // Under dot every matmul is row by row at any size (the router too:
  // LinearRowwise), so a batch far past 32 rows keeps the bits, prompts
  // longer than 32 tokens among them.
  EXPECT_EQ(engine->ExactPrefillBatchTokens(), engine->options().prefill_chunk);
  ExpectBatchedPrefillEqualsAlone(*engine, {12, 23, 5, 16, 27, 9, 40, 33, 2, 1});
}

TEST(EngineBf16KMajorTest, BatchedPrefillMatchesAloneExactly) {
  const testing::RestoreBf16Matmul restore;
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kKMajor).ok());
  const std::unique_ptr<Engine> engine = LoadTinyBf16();
  EXPECT_EQ(engine->ExactPrefillBatchTokens(), 32);
  ExpectBatchedPrefillEqualsAlone(*engine, {1, 12, 9, 2, 5, 1});
}

// A model loaded under --bf16-matmul dot packs k-major as kmajor does and
// sends every row, prefill and decode, to the packed dot kernel: the packs
// hold the only copies, the fingerprint is widen's, the logits are the
// row layout's dot logits up to summation order (x is rounded to bf16 the
// same way), and batches keep each row's bits, in decode (6 and 17
// sequences) and in prefill far past 32 rows.
TEST(EngineBf16DotTest, LoadedUnderDotReadsPacksAndBatchesKeepTheBits) {
  if (!GemvBf16DotAvailable()) GTEST_SKIP() << "this CPU (or PDSERVE_ISA) has no AVX512_BF16: dot cannot run here";
  const testing::RestoreBf16Matmul restore;
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kWiden).ok());
  const std::unique_ptr<Engine> rows = LoadTinyBf16();  // switched to dot after load: the row layout's kernel
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kDot).ok());
  const std::unique_ptr<Engine> engine = LoadTinyBf16();
  ASSERT_NE(engine->model().kmajor_packs(), nullptr);
  EXPECT_EQ(rows->model().kmajor_packs(), nullptr);
  EXPECT_TRUE(engine->model().kmajor_packs()->holds_only_copies());
  EXPECT_EQ(engine->model().Fingerprint(), rows->model().Fingerprint());
  for (const int64_t len : {20, 70}) {
    const at::Tensor packed = PrefillLastLogits(*engine, len), row_layout = PrefillLastLogits(*rows, len);
    EXPECT_FALSE(at::equal(packed, row_layout)) << "prompt " << len << ": the packed kernel did not run";
    EXPECT_TRUE(at::allclose(packed, row_layout, /*rtol=*/1e-2, /*atol=*/1e-2))
        << "prompt " << len << ": max diff " << (packed - row_layout).abs().max().item<float>();
  }
  EXPECT_EQ(engine->ExactPrefillBatchTokens(), engine->options().prefill_chunk);
  ExpectBatchedDecodeEqualsOneAtATime(*engine, 6);
  ExpectBatchedDecodeEqualsOneAtATime(*engine, 17);
  ExpectBatchedPrefillEqualsAlone(*engine, {12, 23, 5, 16, 27, 9, 40, 33, 2, 1});
}

// Int8 weights under PDSERVE_Q8_KERNEL=dot on a CPU with AVX-512 VNNI (run
// as engine_q8kmajor_test; under the default FMA kernel nothing is packed):
// every Q8_0 matrix is packed k-major in place of its rows, and every row
// of x in prefill and decode goes through the pack's kernel: close to the
// row layout's logits but not equal (another summation order; with these
// weights no token's top-2 experts flip on that, which with other seeds
// moves the logits by ~1%); the fingerprint is the row layout's; batches of
// any size keep the bits.
TEST(EngineInt8KMajorTest, PacksReplaceTheRowsAndBatchesKeepTheBits) {
  const auto load = [] {
    ModelWeights w = RandomWeights(testing::TinyConfig(), 3);
    ConvertWeights(&w, WeightsDtype::kInt8);
    return Engine::FromWeights(std::move(w));
  };
  if (!Q8KernelIsDot()) {  // engine_test itself: the FMA kernel reads the rows, so nothing is packed
    EXPECT_FALSE(Q8PacksKMajor());
    EXPECT_EQ(load()->model().kmajor_packs(), nullptr);
    return;
  }
  if (!Q8PacksKMajor()) {
    GTEST_SKIP() << "no int8 packs: this CPU lacks AVX2 + FMA + F16C, or PDSERVE_Q8_KMAJOR=0";
  }
  SetKMajorKeepsRowMajor(true);  // the packs beside the rows, then hidden: the row layout's dot kernel
  const std::unique_ptr<Engine> rows = load();
  SetKMajorKeepsRowMajor(false);
  const std::unique_ptr<Engine> engine = load();
  ASSERT_NE(engine->model().kmajor_packs(), nullptr);
  EXPECT_TRUE(engine->model().kmajor_packs()->holds_only_copies());
  const ModelConfig& c = engine->config();  // per layer q|kv, o, each expert's gate|up and down; the tied head
  EXPECT_EQ(engine->model().kmajor_packs()->count(), c.n_layers * (2 + 2 * (c.n_experts + c.n_shared_experts)) + 1);
  EXPECT_EQ(engine->model().Fingerprint(), rows->model().Fingerprint());
  const auto prefill_rows = [&](int64_t len) {
    SetKMajorPacksInUse(false);
    const at::Tensor logits = PrefillLastLogits(*rows, len);
    SetKMajorPacksInUse(true);
    return logits;
  };
  for (const int64_t len : {20, 70}) {
    const at::Tensor packed = PrefillLastLogits(*engine, len), row_layout = prefill_rows(len);
    EXPECT_FALSE(at::equal(packed, row_layout)) << "prompt " << len << ": the packed kernel did not run";
    EXPECT_TRUE(at::allclose(packed, row_layout, /*rtol=*/1e-5, /*atol=*/1e-5))
        << "prompt " << len << ": max diff " << (packed - row_layout).abs().max().item<float>();
  }
  EXPECT_EQ(engine->ExactPrefillBatchTokens(), engine->options().prefill_chunk);
  EXPECT_EQ(rows->ExactPrefillBatchTokens(), engine->options().prefill_chunk);  // it has packs, hidden or not
  ExpectBatchedDecodeEqualsOneAtATime(*engine, 6);
  ExpectBatchedDecodeEqualsOneAtATime(*engine, 17);
  ExpectBatchedPrefillEqualsAlone(*engine, {12, 23, 5, 16, 27, 9, 40, 33, 2, 1});
}

// A hook that fails stops only its own prompt; the others finish with the
// bits they would have alone. When every prompt has stopped, so has the
// forward: no layer after that is computed.
TEST_F(EngineTest, BatchedPrefillHookStopsOnlyItsPrompt) {
  const std::vector<int64_t> a = Prompt(9, 1), b = Prompt(13, 2);
  auto sa = engine_->NewSequence(), sb = engine_->NewSequence();
  std::vector<int64_t> layers_b;
  PrefillHooks fail_a, count_b;
  fail_a.on_layer_final = [](int64_t layer) -> absl::Status {
    return layer == 1 ? absl::UnavailableError("hand-off broke at layer 1") : absl::OkStatus();
  };
  count_b.on_layer_final = [&](int64_t layer) {
    layers_b.push_back(layer);
    return absl::OkStatus();
  };
  auto out = engine_->PrefillBatch({{sa.get(), &a, &fail_a}, {sb.get(), &b, &count_b}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].status().code(), absl::StatusCode::kUnavailable) << out[0].status();
  ASSERT_TRUE(out[1].ok()) << out[1].status();
  EXPECT_EQ(layers_b.size(), static_cast<size_t>(engine_->config().n_layers));
  auto alone = engine_->NewSequence();
  auto want = engine_->Prefill(alone.get(), b);
  ASSERT_TRUE(want.ok());
  EXPECT_TRUE(at::equal(*out[1], *want));

  int64_t last_layer = -1;
  PrefillHooks cancel_at_0;
  cancel_at_0.on_layer_final = [&](int64_t layer) {
    last_layer = layer;
    return absl::CancelledError("cancelled");
  };
  auto sc = engine_->NewSequence(), sd = engine_->NewSequence();
  out = engine_->PrefillBatch({{sc.get(), &a, &cancel_at_0}, {sd.get(), &b, &cancel_at_0}});
  EXPECT_EQ(out[0].status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(out[1].status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(last_layer, 0);
  EXPECT_LT(sc->cache.seq_len(1), static_cast<int64_t>(a.size()));  // layer 1 never ran
}

TEST_F(EngineTest, BatchedPrefillBeyondTheChunkIsInvalidArgument) {
  EngineOptions o;
  o.prefill_chunk = 16;
  const std::unique_ptr<Engine> engine = Engine::FromWeights(RandomWeights(testing::TinyConfig(), 42), o);
  const std::vector<int64_t> a = Prompt(9), b = Prompt(8), empty;
  auto sa = engine->NewSequence(), sb = engine->NewSequence();
  for (const auto& st : engine->PrefillBatch({{sa.get(), &a, nullptr}, {sb.get(), &b, nullptr}})) {
    EXPECT_EQ(st.status().code(), absl::StatusCode::kInvalidArgument) << st.status();
    EXPECT_NE(std::string(st.status().message()).find("17 tokens"), std::string::npos) << st.status();
  }
  EXPECT_EQ(engine->PrefillBatch({{sa.get(), &empty, nullptr}})[0].status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(sa->pos, 0);
}

TEST_F(EngineTest, BadRequestsAreInvalidArgument) {
  GenerateRequest r;
  r.prompt = {1, 2, 300};
  EXPECT_EQ(engine_->Generate(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.prompt = {1, 2, 3};
  r.max_new_tokens = 0;
  EXPECT_EQ(engine_->Generate(r).status().code(), absl::StatusCode::kInvalidArgument);
  r.max_new_tokens = 4094;
  auto st = engine_->Generate(r).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(st.message()).find("max_context"), std::string::npos) << st;
  auto seq = engine_->NewSequence();
  EXPECT_EQ(engine_->Prefill(seq.get(), {}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EngineTest, CacheCapStopsGenerationWithResourceExhausted) {
  EngineOptions o;
  o.kv.max_tokens = 25;
  auto engine = Engine::FromWeights(engine_->model().weights(), o);
  GenerateRequest r;
  r.prompt = Prompt();
  r.max_new_tokens = 10;
  auto out = engine->Generate(r);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted) << out.status();
}

// eos_token_id, or any of stop_token_ids (gpt-oss's generation_config.json
// list), ends generation unless ignored.
TEST_F(EngineTest, EosStopsUnlessIgnored) {
  auto greedy = GenerateIds(*engine_, {}, true, 20);
  for (const bool in_list : {false, true}) {
    SCOPED_TRACE(in_list ? "stop_token_ids" : "eos_token_id");
    ModelConfig c = testing::TinyConfig();
    if (in_list) {
      c.eos_token_id.reset();
      c.stop_token_ids = {greedy[5]};
    } else {
      c.eos_token_id = greedy[5];
    }
    ModelWeights w = engine_->model().weights();
    w.config = c;
    auto engine = Engine::FromWeights(std::move(w));
    GenerateRequest r;
    r.prompt = Prompt();
    r.max_new_tokens = 20;
    auto out = engine->Generate(r);
    ASSERT_TRUE(out.ok());
    const size_t first = std::find(greedy.begin(), greedy.end(), greedy[5]) - greedy.begin();
    EXPECT_EQ(out->size(), first + 1);
    r.stop_at_eos = false;
    EXPECT_EQ(engine->Generate(r)->size(), 20u);
  }
}

TEST(EngineTrainingTest, ForwardIsDifferentiable) {
  ModelWeights w = RandomWeights(testing::TinyConfig(), 7);
  for (NamedTensor& nt : NamedTensors(&w)) nt.tensor->requires_grad_(true);
  Transformer model(w);
  at::Tensor ids = at::arange(0, 12, at::kLong);
  ForwardOptions fo;
  fo.all_logits = true;
  auto logits = model.Forward(ids, {Segment{nullptr, 0, 12}}, fo);
  ASSERT_TRUE(logits.ok()) << logits.status();
  ASSERT_EQ(logits->size(0), 12);
  at::Tensor loss = at::cross_entropy_loss(logits->narrow(0, 0, 11), ids.narrow(0, 1, 11));
  loss.backward();
  EXPECT_TRUE(w.layers[0].q_proj.grad().defined());
  EXPECT_GT(w.layers[1].gate_proj.grad().abs().sum().item<float>(), 0.0f);
  EXPECT_GT(w.layers[2].sink_bias.grad().abs().sum().item<float>(), 0.0f);
  EXPECT_GT(w.embed.grad().abs().sum().item<float>(), 0.0f);
}


// --f32-packed-weights changes how prefill's GEMMs read the weights, not the
// math: every layer's matmul weights are packed, and a 70-token prompt
// (past the row kernels' 32 rows) gives the same logits within fp32
// rounding as without packs (gemm_dnnl_test shows a pack in scope is what
// the GEMM reads).
TEST(EnginePackedTest, PackedWeightsGiveTheSameLogits) {
  if (!DnnlGemmBuilt()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev): nothing packs";
  const ModelWeights weights = RandomWeights(testing::TinyConfig(), 42);
  ModelWeights copy = weights;
  for (NamedTensor& nt : NamedTensors(&copy)) *nt.tensor = nt.tensor->clone();
  const std::unique_ptr<Engine> plain = Engine::FromWeights(copy);
  SetPackF32Weights(true);
  const std::unique_ptr<Engine> packed = Engine::FromWeights(weights);
  SetPackF32Weights(false);
  const std::vector<int64_t> prompt = Prompt(70);
  auto a = plain->ForwardNoCache(prompt);
  auto b = packed->ForwardNoCache(prompt);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(at::allclose(*a, *b, 1e-4, 1e-5));
  const ModelConfig& c = packed->model().config();
  ASSERT_NE(packed->model().packed_f32(), nullptr);
  EXPECT_EQ(packed->model().packed_f32()->count(), c.n_layers * (2 + 2 * c.n_experts + 2 * c.n_shared_experts));
  EXPECT_EQ(plain->model().packed_f32(), nullptr);
  EXPECT_TRUE(at::equal(a->argmax(-1), b->argmax(-1)));
}

// With bf16 weights on the widening path the packs hold them widened: the
// logits are bit for bit those of widening per call (the same packed values
// and kernel), and only that path packs.
TEST(EnginePackedTest, PackedBf16WeightsGiveTheSameBits) {
  if (!DnnlGemmBuilt()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev): nothing packs";
  struct Restore {
    ~Restore() {
      SetPackF32Weights(false);
      (void)SetBf16Matmul(DefaultBf16Matmul());
    }
  } restore;
  ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kWiden).ok());
  ModelWeights weights = RandomWeights(testing::TinyConfig(), 43);
  ConvertWeights(&weights, WeightsDtype::kBF16);
  ModelWeights copy = weights;
  for (NamedTensor& nt : NamedTensors(&copy)) *nt.tensor = nt.tensor->clone();
  const std::unique_ptr<Engine> plain = Engine::FromWeights(copy);
  SetPackF32Weights(true);
  EXPECT_TRUE(PacksLayerWeights(WeightsDtype::kBF16));
  EXPECT_FALSE(PacksLayerWeights(WeightsDtype::kInt8));
  const std::unique_ptr<Engine> packed = Engine::FromWeights(weights);
  const std::vector<int64_t> prompt = Prompt(70);
  auto a = plain->ForwardNoCache(prompt);
  auto b = packed->ForwardNoCache(prompt);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(at::equal(*a, *b));
  const ModelConfig& c = packed->model().config();
  ASSERT_NE(packed->model().packed_f32(), nullptr);
  EXPECT_EQ(packed->model().packed_f32()->count(), c.n_layers * (2 + 2 * c.n_experts + 2 * c.n_shared_experts));
  EXPECT_EQ(plain->model().packed_f32(), nullptr);
  if (GemvBf16DotAvailable()) {  // the dot path reads bf16 as it is: nothing to pack
    ASSERT_TRUE(SetBf16Matmul(Bf16Matmul::kDot).ok());
    EXPECT_FALSE(PacksLayerWeights(WeightsDtype::kBF16));
    EXPECT_EQ(Engine::FromWeights(copy)->model().packed_f32(), nullptr);
  }
}

// bf16 weights act as their exact fp32 values on every Linear path: the
// GEMV kernels (<= 32 rows), and for more rows the default path (the AMX
// split GEMM where the CPU has it: fp32 accuracy, another summation order)
// and the widened-weight GEMM (bit-exact against the fp32 GEMM that fp32
// weights take, LinearF32), whose per-thread buffer is reused across
// weights of different shapes.
TEST(LinearTest, Bf16WeightsEqualTheirFp32Values) {
  at::manual_seed(5);
  const at::Tensor big = at::randn({96, 64}).to(at::kBFloat16), small = at::randn({40, 64}).to(at::kBFloat16);
  for (int64_t rows : {1, 8, 33, 70}) {
    const at::Tensor x = at::randn({rows, 64});
    for (const at::Tensor& w : {big, small, big}) {
      const at::Tensor want = at::linear(x, w.to(at::kFloat));
      EXPECT_TRUE(at::allclose(Linear(x, w), want, 1e-5, 1e-5)) << rows << " rows, weight " << w.sizes();
      if (rows > 32) {
        EXPECT_TRUE(at::equal(LinearBf16Widened(x, w), LinearF32(x, w.to(at::kFloat))))
            << rows << " rows, weight " << w.sizes();
      }
    }
  }
}

}  // namespace
}  // namespace pdserve
