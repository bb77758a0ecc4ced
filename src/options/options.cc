// Parsing, merging and listing of the options declared in options.h. Every function here walks
// WSYNC_OPTION_LIST, so a new option needs no change in this file.
#include "options/options.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace wsync {
namespace {

bool equalsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

// ---- Per type: parse, format, name the type, list the accepted values. Overloads on the field's
// type; the enum versions take their names from optionChoices().

template <typename E>
concept OptionEnum = std::is_enum_v<E>;

bool parseValue(std::string_view text, bool& out) {
  for (const char* yes : {"1", "true", "yes", "on"}) {
    if (!equalsIgnoringCase(text, yes)) continue;
    out = true;
    return true;
  }
  for (const char* no : {"0", "false", "no", "off"}) {
    if (!equalsIgnoringCase(text, no)) continue;
    out = false;
    return true;
  }
  return false;
}

bool parseValue(std::string_view text, int& out) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return false;
  out = value;
  return true;
}

// A share: a decimal number in (0, 1].
bool parseValue(std::string_view text, double& out) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !(value > 0 && value <= 1))
    return false;
  out = value;
  return true;
}

bool parseValue(std::string_view text, std::string& out) {
  out = std::string(text);
  return true;
}

template <OptionEnum E>
bool parseValue(std::string_view text, E& out) {
  for (const OptionChoice<E>& choice : optionChoices(E{})) {
    if (!equalsIgnoringCase(text, choice.name)) continue;
    out = choice.value;
    return true;
  }
  return false;
}

std::string formatValue(bool value) {
  return value ? "1" : "0";
}
std::string formatValue(int value) {
  return std::to_string(value);
}
std::string formatValue(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}
std::string formatValue(const std::string& value) {
  return value;
}
template <OptionEnum E>
std::string formatValue(E value) {
  return optionValueName(value);
}

// "a, b or c", each name wrapped in `quote`.
template <OptionEnum E>
std::string choiceList(const char* quote) {
  const auto choices = optionChoices(E{});
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (i > 0) list += i + 1 == choices.size() ? " or " : ", ";
    list += std::string(quote) + choices[i].name + quote;
  }
  return list;
}

std::string typeName(bool) {
  return "bool";
}
std::string typeName(int) {
  return "int";
}
std::string typeName(double) {
  return "share";
}
std::string typeName(const std::string&) {
  return "string";
}
template <OptionEnum E>
std::string typeName(E) {
  return choiceList<E>("`");
}

std::string acceptedValues(bool) {
  return "1, true, yes, on, 0, false, no or off";
}
std::string acceptedValues(int) {
  return "a whole number from 0 to 2147483647";
}
std::string acceptedValues(double) {
  return "a number in (0, 1]";
}
std::string acceptedValues(const std::string&) {
  return "any text";
}
template <OptionEnum E>
std::string acceptedValues(E) {
  return choiceList<E>("");
}

template <typename T>
Status parseInto(const char* env, std::string_view text, T& out) {
  if (parseValue(text, out)) return Status::ok();
  return invalidArgument(std::string(env) + "='" + std::string(text) + "': expected " +
                         acceptedValues(out));
}

template <OptionEnum E>
const char* nameOf(E value) {
  for (const OptionChoice<E>& choice : optionChoices(E{})) {
    if (choice.value == value) return choice.name;
  }
  return "?";
}

std::string defaultCell(const std::string& formatted) {
  return formatted.empty() ? "unset" : "`" + formatted + "`";
}

std::string markdownRow(const OptionInfo& info) {
  std::string variable = std::string("`") + info.env + "`";
  if (info.kind == OptionKind::kDebug) variable += " (debug)";
  if (info.kind == OptionKind::kPythonSide) variable += " (python)";
  const std::string config =
      *info.config_field == '\0' ? std::string() : std::string("`") + info.config_field + "`";
  return "| " + variable + " | " + info.type + " | " + info.default_value + " | " + config + " | " +
         info.doc + " |\n";
}

// The README table's section of a row: settings (secrets among them), Python's, debug switches.
OptionKind sectionOf(OptionKind kind) {
  return kind == OptionKind::kSecret ? OptionKind::kSetting : kind;
}

}  // namespace

const char* processEnvironment(const char* name) {
  return std::getenv(name);  // the one getenv of wsync's options
}

const char* optionValueName(DeviceTransport value) {
  return nameOf(value);
}
const char* optionValueName(CudaIpcExport value) {
  return nameOf(value);
}
const char* optionValueName(HostCopy value) {
  return nameOf(value);
}

Result<Options> readOptions(const std::function<const char*(const char*)>& lookup) {
  Options options;
  std::string errors;
#define WSYNC_OPTION_READ_(scope, field, type, default_value, env, kind, config, doc)  \
  if (const char* text = lookup(env); text != nullptr && *text != '\0') {              \
    if (Status status = parseInto(env, text, WSYNC_OPTION_REF(options, scope, field)); \
        status.isOk()) {                                                               \
      options.from_environment.set(static_cast<size_t>(OptionId::field));              \
    } else {                                                                           \
      errors += (errors.empty() ? "" : "; ") + status.message();                       \
    }                                                                                  \
  }
  WSYNC_OPTION_LIST(WSYNC_OPTION_READ_)
#undef WSYNC_OPTION_READ_
  if (!errors.empty()) return invalidArgument(errors);
  return options;
}

Status setOption(Options& options, std::string_view env, std::string_view text) {
#define WSYNC_OPTION_SET_(scope, field, type, default_value, env_name, kind, config, doc) \
  if (env == (env_name))                                                                  \
    return parseInto((env_name), text, WSYNC_OPTION_REF(options, scope, field));
  WSYNC_OPTION_LIST(WSYNC_OPTION_SET_)
#undef WSYNC_OPTION_SET_
  return invalidArgument("'" + std::string(env) + "' is not a wsync option variable");
}

Options resolve(const Options& configured, const Options& environment) {
  Options effective;
#define WSYNC_OPTION_RESOLVE_(scope, field, type, default_value, env, kind, config, doc)        \
  WSYNC_OPTION_REF(effective, scope, field) = environment.fromEnvironment(OptionId::field)      \
                                                  ? WSYNC_OPTION_REF(environment, scope, field) \
                                                  : WSYNC_OPTION_REF(configured, scope, field);
  WSYNC_OPTION_LIST(WSYNC_OPTION_RESOLVE_)
#undef WSYNC_OPTION_RESOLVE_
  effective.from_environment = environment.from_environment;
  effective.from_config = configured.from_config;
  return effective;
}

const std::vector<OptionInfo>& optionTable() {
  static const std::vector<OptionInfo> table = [] {
    const Options defaults;
    std::vector<OptionInfo> rows;
#define WSYNC_OPTION_INFO_(scope, field, type, default_value, env, kind, config, doc)              \
  rows.push_back({OptionId::field, env, #field,                                                    \
                  typeName(WSYNC_OPTION_REF(defaults, scope, field)),                              \
                  defaultCell(formatValue(WSYNC_OPTION_REF(defaults, scope, field))), config, doc, \
                  OptionKind::kind, OptionKind::kind == OptionKind::kDebug});
    WSYNC_OPTION_LIST(WSYNC_OPTION_INFO_)
#undef WSYNC_OPTION_INFO_
    return rows;
  }();
  return table;
}

std::string optionsMarkdownTable() {
  std::string table =
      "| variable | type | default | config field | effect |\n| --- | --- | --- | --- | --- |\n";
  for (OptionKind last : {OptionKind::kSetting, OptionKind::kPythonSide, OptionKind::kDebug}) {
    for (const OptionInfo& info : optionTable()) {
      if (sectionOf(info.kind) == last) table += markdownRow(info);
    }
  }
  return table;
}

Status checkJobSettingsAgree(std::span<const std::pair<std::string, JobSettings>> ranks) {
  if (ranks.empty()) return Status::ok();
  const auto& [first_name, first] = ranks.front();
  std::string differences;
#define WSYNC_OPTION_AGREE_(scope, field, type, default_value, env, kind, config, doc)            \
  {                                                                                               \
    std::string differing;                                                                        \
    for (const auto& [name, settings] : ranks) {                                                  \
      if (settings.field == first.field) continue;                                                \
      differing += (differing.empty() ? "" : ", ") + formatValue(settings.field) + " on " + name; \
    }                                                                                             \
    if (!differing.empty()) {                                                                     \
      differences += (differences.empty() ? "" : "; ") + std::string(env) + " is " +              \
                     formatValue(first.field) + " on " + first_name + " but " + differing;        \
    }                                                                                             \
  }
  WSYNC_JOB_OPTION_LIST(WSYNC_OPTION_AGREE_)
#undef WSYNC_OPTION_AGREE_
  if (differences.empty()) return Status::ok();
  return invalidArgument(
      "job-wide settings differ between ranks (the coordinator's are used; set "
      "them alike on every rank): " +
      differences);
}

NamedSettingValues explicitJobSettings(const Options& options) {
  NamedSettingValues set;
#define WSYNC_OPTION_EXPLICIT_(scope, field, type, default_value, env, kind, config, doc) \
  if (options.explicitlySet(OptionId::field)) set.emplace_back(env, formatValue(options.job.field));
  WSYNC_JOB_OPTION_LIST(WSYNC_OPTION_EXPLICIT_)
#undef WSYNC_OPTION_EXPLICIT_
  return set;
}

Result<JobSettings> withJobSettings(const JobSettings& decided, const NamedSettingValues& set) {
  Options options;
  options.job = decided;
  for (const auto& [variable, value] : set) {
    bool job_wide = false;
#define WSYNC_OPTION_IS_JOB_(scope, field, type, default_value, env, kind, config, doc) \
  job_wide = job_wide || variable == (env);
    WSYNC_JOB_OPTION_LIST(WSYNC_OPTION_IS_JOB_)
#undef WSYNC_OPTION_IS_JOB_
    if (!job_wide) return invalidArgument("'" + variable + "' is not a job-wide option");
    WSYNC_RETURN_IF_ERROR(setOption(options, variable, value));
  }
  return options.job;
}

std::string describeOptions(const Options& options) {
  std::string lines;
#define WSYNC_OPTION_DESCRIBE_(scope, field, type, default_value, env, kind, config, doc) \
  {                                                                                       \
    std::string value = formatValue(WSYNC_OPTION_REF(options, scope, field));             \
    if (OptionKind::kind == OptionKind::kSecret && !value.empty()) value = "(set)";       \
    lines += std::string(env) + "=" + value;                                              \
    if (options.fromEnvironment(OptionId::field)) lines += "  (environment)";             \
    lines += "\n";                                                                        \
  }
  WSYNC_OPTION_LIST(WSYNC_OPTION_DESCRIBE_)
#undef WSYNC_OPTION_DESCRIBE_
  return lines;
}

std::vector<std::string> unknownOptionVariables(const char* const* envp) {
  std::vector<std::string> unknown;
  for (; envp != nullptr && *envp != nullptr; ++envp) {
    const std::string_view entry(*envp);
    const std::string_view name = entry.substr(0, entry.find('='));
    if (!name.starts_with("WSYNC_")) continue;
    bool known = false;
    for (const OptionInfo& info : optionTable())
      known = known || name == info.env;
    if (!known) unknown.emplace_back(name);
  }
  return unknown;
}

}  // namespace wsync
