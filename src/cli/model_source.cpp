#include "cli/model_source.h"

#include <cstdio>
#include <memory>

#include "cli/progress_bar.h"

namespace ds {

Result<PulledModel> pull_with_progress(const HubReference& reference) {
  HubClient client(HubClientOptions::from_environment());
  std::unique_ptr<ProgressBar> bar;
  PullObserver observer;
  observer.started = [&](const std::string& file, int64_t size) {
    bar = std::make_unique<ProgressBar>(file, size, "bytes", ProgressBar::Lines::at_end);
  };
  observer.progress = [&](int64_t done) {
    if (bar) bar->update(done);
  };
  observer.finished = [&](const std::string& file, bool downloaded) {
    if (bar) bar->finish();
    bar.reset();
    if (!downloaded) std::fprintf(stderr, "%s: in the cache\n", file.c_str());
  };
  return pull_model(reference, client, PullOptions::from_environment(), observer);
}

Result<std::string> model_source_path(const std::string& argument) {
  if (!is_hub_url(argument)) return argument;
  auto reference = parse_hub_url(argument);
  if (!reference.ok()) return reference.status();
  auto pulled = pull_with_progress(reference.value());
  if (!pulled.ok()) return Status::error(argument + ": " + pulled.message());
  return pulled.value().paths.front();
}

}  // namespace ds
