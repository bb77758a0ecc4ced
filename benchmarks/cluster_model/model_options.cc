#include "model_options.h"

namespace wsync::cluster {

void addModelOptions(cxxopts::Options& options, const std::string& default_memory) {
  // clang-format off
  options.add_options("model")
      ("model", "llama3-8b | qwen3-30b-a3b | kimi-k2 | custom", cxxopts::value<std::string>())
      ("hidden", "custom: hidden size", cxxopts::value<int64_t>()->default_value("1024"))
      ("layers", "custom: decoder layers", cxxopts::value<int>()->default_value("4"))
      ("ffn", "custom: MLP intermediate size", cxxopts::value<int64_t>()->default_value("4096"))
      ("vocab", "custom: vocabulary", cxxopts::value<int64_t>()->default_value("32000"))
      ("heads", "custom: attention heads", cxxopts::value<int>()->default_value("16"))
      ("kv-heads", "custom: KV heads", cxxopts::value<int>()->default_value("4"))
      ("memory", "host | device (both roles)",
       cxxopts::value<std::string>()->default_value(default_memory));
  // clang-format on
  addLayoutOptions(options);
}

Result<ModelSpec> modelFromOptions(const cxxopts::ParseResult& args) {
  if (!args.count("model")) return invalidArgument("--model is required");
  const std::string name = args["model"].as<std::string>();
  if (name != "custom") return makeModel(name);
  ModelConfig c;
  c.name = "custom";
  c.hidden = args["hidden"].as<int64_t>();
  c.num_layers = args["layers"].as<int>();
  c.num_heads = args["heads"].as<int>();
  c.num_kv_heads = args["kv-heads"].as<int>();
  c.head_dim = c.num_heads > 0 ? static_cast<int>(c.hidden / c.num_heads) : 0;
  c.intermediate = args["ffn"].as<int64_t>();
  c.vocab = args["vocab"].as<int64_t>();
  return makeModel(c);
}

Result<ModelLayouts> jobLayoutsFromOptions(const ModelSpec& model,
                                           const cxxopts::ParseResult& args) {
  WSYNC_ASSIGN_OR_RETURN(ModelLayouts layouts, layoutsFromOptions(model, args));
  const std::string memory = args["memory"].as<std::string>();
  if (memory != "host" && memory != "device")
    return invalidArgument("--memory must be host or device, got " + memory);
  const MemoryKind kind = memory == "device" ? MemoryKind::kDevice : MemoryKind::kHost;
  layouts.trainer.memory = kind;
  layouts.rollout.memory = kind;
  return layouts;
}

}  // namespace wsync::cluster
