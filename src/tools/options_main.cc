// wsync-options: lists wsync's environment variables.
//
//   wsync-options             this environment's effective values, one VARIABLE=value per line
//                             ("(environment)" marks those set here); warns on stderr about
//                             WSYNC_ variables no option reads. Exit 2 when a value is bad.
//   wsync-options --markdown  the README's "Environment variables" table
#include <cstdio>
#include <cxxopts.hpp>
#include <exception>

#include "options/options.h"

extern char** environ;

namespace {

int run(int argc, char** argv) {
  cxxopts::Options cli("wsync-options", "wsync's environment variables");
  cli.add_options()("markdown", "print the options' markdown table (the README's)")(
      "h,help", "print this help");
  const cxxopts::ParseResult args = cli.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", cli.help().c_str());
    return 0;
  }
  if (args.count("markdown")) {
    std::fputs(wsync::optionsMarkdownTable().c_str(), stdout);
    return 0;
  }
  for (const std::string& name : wsync::unknownOptionVariables(environ)) {
    std::fprintf(stderr, "wsync-options: warning: %s is not a wsync option (misspelled?)\n",
                 name.c_str());
  }
  const wsync::Result<wsync::Options> options = wsync::readOptions();
  if (!options.isOk()) {
    std::fprintf(stderr, "wsync-options: %s\n", options.status().message().c_str());
    return 2;
  }
  std::fputs(wsync::describeOptions(options.value()).c_str(), stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wsync-options: %s\n", e.what());
    return 2;
  }
}
