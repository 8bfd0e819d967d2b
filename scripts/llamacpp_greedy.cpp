// llamacpp_greedy.cpp: greedy generation through llama.cpp's library, printing token ids.
//
// scripts/gptoss_llamacpp_agreement.sh builds it against the llama.cpp build of
// scripts/bench_vs_llamacpp.sh (.cache/llama/build) and compares its ids with
// pdserve-generate's. llama-completion prints only text (the generated ids are not in its
// output); this does what llama-completion --temp 0 -no-cnv --ignore-eos does (the prompt
// tokenized with add_special and parse_special, one decode of the prompt, then argmax of the
// last logits, ties to the lower id, one token per decode) and prints the ids, the text and
// optionally the top logits of every step. The context defaults are llama-completion's:
// n_ctx 4096, n_batch 2048, n_ubatch 512, flash attention auto, f16 KV cache.
//
// Usage: llamacpp-greedy -m GGUF -n N [-t THREADS] [--fa on|off|auto] [--kv f16|f32|bf16]
//                        [--top K] < prompts.txt
// prompts.txt: one prompt a line (text; "ids:1,2,3" for token ids). Output: one JSON line a
// prompt: {"prompt_ids": [...], "token_ids": [...], "text_hex": "...", "top": [[[id, logit], ...], ...]}.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "llama.h"

static void quiet_log(ggml_log_level level, const char* text, void*) {
  if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static void die(const std::string& msg) {
  fprintf(stderr, "llamacpp-greedy: %s\n", msg.c_str());
  exit(2);
}

int main(int argc, char** argv) {
  std::string model_path, fa = "auto", kv = "f16";
  int n_new = 32, threads = 2, top = 0;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) die("missing value for " + a);
      return argv[++i];
    };
    if (a == "-m") model_path = next();
    else if (a == "-n") n_new = atoi(next().c_str());
    else if (a == "-t") threads = atoi(next().c_str());
    else if (a == "--fa") fa = next();
    else if (a == "--kv") kv = next();
    else if (a == "--top") top = atoi(next().c_str());
    else if (a == "-h" || a == "--help") {
      puts("Usage: llamacpp-greedy -m GGUF -n N [-t THREADS] [--fa on|off|auto] [--kv f16|f32|bf16] [--top K] < prompts");
      return 0;
    } else die("unknown argument " + a);
  }
  if (model_path.empty()) die("-m GGUF is required");
  llama_log_set(quiet_log, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(model_path.c_str(), mp);
  if (!model) die("cannot load " + model_path);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 4096;
  cp.n_batch = 2048;
  cp.n_ubatch = 512;
  cp.n_threads = cp.n_threads_batch = threads;
  cp.flash_attn_type = fa == "on" ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                       : fa == "off" ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
  ggml_type kt = kv == "f32" ? GGML_TYPE_F32 : kv == "bf16" ? GGML_TYPE_BF16 : GGML_TYPE_F16;
  cp.type_k = cp.type_v = kt;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) die("cannot create a context");
  const int n_vocab = llama_vocab_n_tokens(vocab);

  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    std::vector<llama_token> ids;
    if (line.rfind("ids:", 0) == 0) {
      for (const char* p = line.c_str() + 4; *p;) {
        ids.push_back((llama_token)strtol(p, (char**)&p, 10));
        if (*p == ',') p++;
      }
    } else {
      ids.resize(line.size() + 16);
      int n = llama_tokenize(vocab, line.data(), (int)line.size(), ids.data(), (int)ids.size(), true, true);
      if (n < 0) die("tokenize failed");
      ids.resize(n);
    }
    llama_memory_clear(llama_get_memory(ctx), true);
    std::vector<llama_token> prompt = ids, out;
    std::string text, tops;
    llama_batch batch = llama_batch_get_one(prompt.data(), (int)prompt.size());
    for (int step = 0; step < n_new; step++) {
      if (llama_decode(ctx, batch)) die("decode failed");
      const float* logits = llama_get_logits_ith(ctx, -1);
      int best = 0;
      for (int v = 1; v < n_vocab; v++)
        if (logits[v] > logits[best]) best = v;
      if (top > 0) {
        std::vector<int> idx;
        std::vector<bool> used(n_vocab, false);
        for (int k = 0; k < top; k++) {
          int b = -1;
          for (int v = 0; v < n_vocab; v++)
            if (!used[v] && (b < 0 || logits[v] > logits[b])) b = v;
          used[b] = true;
          idx.push_back(b);
        }
        tops += step ? ",[" : "[";
        for (int k = 0; k < top; k++) {
          char buf[64];
          snprintf(buf, sizeof buf, "%s[%d,%.6g]", k ? "," : "", idx[k], logits[idx[k]]);
          tops += buf;
        }
        tops += "]";
      }
      out.push_back(best);
      char piece[256];
      int n = llama_token_to_piece(vocab, best, piece, sizeof piece, 0, false);
      if (n > 0) text.append(piece, n);
      batch = llama_batch_get_one(&out.back(), 1);
    }
    std::string js = "{\"prompt_ids\":[";
    for (size_t i = 0; i < prompt.size(); i++) js += (i ? "," : "") + std::to_string(prompt[i]);
    js += "],\"token_ids\":[";
    for (size_t i = 0; i < out.size(); i++) js += (i ? "," : "") + std::to_string(out[i]);
    js += "],\"text_hex\":\"";
    for (unsigned char c : text) {
      char h[3];
      snprintf(h, sizeof h, "%02x", c);
      js += h;
    }
    js += "\"";
    if (top > 0) js += ",\"top\":[" + tops + "]";
    js += "}";
    puts(js.c_str());
    fflush(stdout);
  }
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
