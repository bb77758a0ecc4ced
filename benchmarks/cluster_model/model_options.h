// Command-line model choice shared by wsync-cluster-model and wsync-cluster-rank: a zoo model
// (--model llama3-8b | qwen3-30b-a3b | kimi-k2) or a small llama-style model sized by flags
// (--model custom --hidden --layers --ffn --vocab --heads --kv-heads), plus the layout flags of
// src/models/model_layouts.h and --memory host|device for both roles.
// Thread-safety: pure functions.
#pragma once

#include <string>

#include <cxxopts.hpp>

#include "common/status.h"
#include "model_layouts.h"
#include "model_zoo.h"

namespace wsync::cluster {

void addModelOptions(cxxopts::Options& options, const std::string& default_memory);
// The model of --model (custom: the sizing flags; a llama-style dense GQA model named "custom").
Result<ModelSpec> modelFromOptions(const cxxopts::ParseResult& args);
// layoutsFromOptions plus --memory for both roles.
Result<ModelLayouts> jobLayoutsFromOptions(const ModelSpec& model,
                                           const cxxopts::ParseResult& args);

}  // namespace wsync::cluster
