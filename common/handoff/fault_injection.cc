#include "common/handoff/fault_injection.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/util/log.h"

namespace pdserve {

namespace {

constexpr HandoffFault kAllFaults[] = {HandoffFault::kDrop,    HandoffFault::kCorrupt,  HandoffFault::kDuplicate,
                                       HandoffFault::kReorder, HandoffFault::kTruncate, HandoffFault::kDelay};

struct Injector {
  HandoffFaultConfig config;
  std::mutex mu;
  std::mt19937_64 rng;
  uint64_t handoffs = 0;
};

// Read once, before main: the writer threads only read the pointer.
Injector* LoadFromEnvironment() {
  const char* spec = std::getenv("PDSERVE_FAULT_HANDOFF");
  if (spec == nullptr || *spec == '\0') return nullptr;
  absl::StatusOr<HandoffFaultConfig> config = ParseHandoffFaultSpec(spec);
  if (!config.ok()) {
    std::fprintf(stderr, "PDSERVE_FAULT_HANDOFF=\"%s\": %s\n", spec, std::string(config.status().message()).c_str());
    std::exit(2);
  }
  auto* injector = new Injector;
  injector->config = *config;
  injector->rng.seed(config->seed);
  std::vector<std::string> kinds;
  for (HandoffFault k : config->kinds) kinds.emplace_back(HandoffFaultName(k));
  std::fprintf(stderr,
               "kv hand-off fault injection ON (PDSERVE_FAULT_HANDOFF): rate=%g seed=%llu kinds=%s delay_ms=%lld; "
               "for tests only\n",
               config->rate, static_cast<unsigned long long>(config->seed), absl::StrJoin(kinds, "+").c_str(),
               static_cast<long long>(config->delay_ms));
  return injector;
}

Injector* const g_injector = LoadFromEnvironment();

}  // namespace

const char* HandoffFaultName(HandoffFault fault) {
  switch (fault) {
    case HandoffFault::kDrop:
      return "drop";
    case HandoffFault::kCorrupt:
      return "corrupt";
    case HandoffFault::kDuplicate:
      return "duplicate";
    case HandoffFault::kReorder:
      return "reorder";
    case HandoffFault::kTruncate:
      return "truncate";
    case HandoffFault::kDelay:
      return "delay";
  }
  return "?";
}

absl::StatusOr<HandoffFaultConfig> ParseHandoffFaultSpec(std::string_view spec) {
  HandoffFaultConfig config;
  bool have_rate = false;
  const absl::string_view text(spec.data(), spec.size());
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    const absl::string_view key = kv.first, value = kv.second;
    if (key == "rate") {
      if (!absl::SimpleAtod(value, &config.rate) || !(config.rate >= 0 && config.rate <= 1)) {
        return absl::InvalidArgumentError(absl::StrCat("rate must be a number in [0, 1], not '", value, "'"));
      }
      have_rate = true;
    } else if (key == "seed") {
      if (!absl::SimpleAtoi(value, &config.seed)) {
        return absl::InvalidArgumentError(absl::StrCat("seed must be a non-negative integer, not '", value, "'"));
      }
    } else if (key == "delay_ms") {
      if (!absl::SimpleAtoi(value, &config.delay_ms) || config.delay_ms < 0 || config.delay_ms > 600000) {
        return absl::InvalidArgumentError(absl::StrCat("delay_ms must be in [0, 600000], not '", value, "'"));
      }
    } else if (key == "kinds") {
      for (absl::string_view name : absl::StrSplit(value, '+')) {
        bool found = false;
        for (HandoffFault k : kAllFaults) {
          if (name == HandoffFaultName(k)) {
            config.kinds.push_back(k);
            found = true;
          }
        }
        if (!found) {
          return absl::InvalidArgumentError(absl::StrCat(
              "unknown fault kind '", name, "' (drop, corrupt, duplicate, reorder, truncate, delay)"));
        }
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown key '", key, "' (rate=, seed=, kinds=a+b, delay_ms=)"));
    }
  }
  if (!have_rate) return absl::InvalidArgumentError("rate= is required, e.g. rate=0.1,seed=7");
  if (config.kinds.empty()) config.kinds.assign(std::begin(kAllFaults), std::end(kAllFaults));
  return config;
}

std::unique_ptr<HandoffFaultPlan> HandoffFaultPlan::ForNextHandoff() {
  Injector* in = g_injector;
  if (in == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(in->mu);
  const uint64_t number = ++in->handoffs;
  const double u = std::uniform_real_distribution<double>(0, 1)(in->rng);
  const size_t kind = std::uniform_int_distribution<size_t>(0, in->config.kinds.size() - 1)(in->rng);
  const int target = std::uniform_int_distribution<int>(0, 2)(in->rng);
  if (!(u < in->config.rate)) return nullptr;
  return std::make_unique<HandoffFaultPlan>(in->config.kinds[kind], target, in->config.delay_ms, number);
}

HandoffFaultPlan::HandoffFaultPlan(HandoffFault kind, int target_data_chunk, int64_t delay_ms,
                                   uint64_t handoff_number)
    : kind_(kind), target_(target_data_chunk), delay_ms_(delay_ms), number_(handoff_number) {}

void HandoffFaultPlan::Log(const internal::v1::KvChunk& chunk) const {
  const char* what = chunk.has_data() ? "data chunk" : chunk.has_commit() ? "commit" : "chunk";
  log::Warn(absl::StrFormat("kv hand-off fault injection: %s at %s seq %u of request %s "
                            "(hand-off #%llu of this process)",
                            HandoffFaultName(kind_), what, chunk.seq(), request_id_,
                            static_cast<unsigned long long>(number_)),
            {{"worker_request_id", request_id_}}, log::TextPrefix::None());
}

bool HandoffFaultPlan::Write(internal::v1::KvChunk& chunk, WriteFn write, const std::atomic<bool>* cancel) {
  if (truncated_) return true;  // the stream ends here: nothing more, no commit
  if (chunk.has_progress()) return write(chunk);  // heartbeats are outside the seq order: left alone
  if (chunk.has_header()) request_id_ = chunk.header().request_id().substr(0, 200);
  bool hit = false;
  if (!applied_) {
    if (chunk.has_data()) hit = data_seen_++ == target_;
    if (chunk.has_commit()) hit = true;  // fewer data chunks than the target: the commit gets it
  }
  if (held_.has_value()) {  // reorder: this chunk first, then the one held back
    internal::v1::KvChunk held = std::move(*held_);
    held_.reset();
    const bool ok = write(chunk);
    return write(held) && ok;
  }
  if (!hit) return write(chunk);
  applied_ = true;
  Log(chunk);
  switch (kind_) {
    case HandoffFault::kDrop:
      return true;
    case HandoffFault::kCorrupt:
      if (chunk.has_data() && !chunk.data().payload().empty()) {
        std::string* p = chunk.mutable_data()->mutable_payload();
        (*p)[p->size() / 2] = static_cast<char>((*p)[p->size() / 2] ^ 0x5a);
      } else {
        chunk.set_crc32c(chunk.crc32c() ^ 0x1u);
      }
      return write(chunk);
    case HandoffFault::kDuplicate: {
      internal::v1::KvChunk copy = chunk;  // the NCCL writer moves the payload out of the one it writes
      return write(chunk) && write(copy);
    }
    case HandoffFault::kReorder:
      if (chunk.has_commit()) return write(chunk);  // nothing comes after the commit to swap it with
      held_ = std::move(chunk);
      return true;
    case HandoffFault::kTruncate:
      truncated_ = true;
      return true;
    case HandoffFault::kDelay: {
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms_);
      while (std::chrono::steady_clock::now() < until && !(cancel != nullptr && cancel->load())) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      return write(chunk);
    }
  }
  return write(chunk);
}

bool HandoffFaultPlan::Flush(WriteFn write) {
  if (!held_.has_value()) return true;
  internal::v1::KvChunk held = std::move(*held_);
  held_.reset();
  return write(held);
}

}  // namespace pdserve
