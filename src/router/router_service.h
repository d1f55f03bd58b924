#pragma once
// The router's HTTP side: the OpenAI API passed through to an instance
// (streams stay streams), with serve's API keys and tenant limits in front.
//
// Each request goes to a healthy instance (instance_pool.h: the routing
// rule). A request the client has received nothing of yet — its instance
// could not be reached, refused it with 503, or failed before the first
// piece of its body (the head is held back until then) — is sent to the next
// instance, each at most once; a stream that breaks after it began ends with
// an error event and [DONE]. A client that leaves closes the upstream connection, which the
// instance sees as its client leaving (the generation is cancelled).
//
//   GET /                  the status page (status_page.h): static, the figures come from the admin routes
//   GET /health            the router is alive
//   GET /ready             200 while at least one instance is healthy; the body lists those that are not
//   GET /metrics           Prometheus: requests by instance and status, retries, each instance's state (an API key, as serve's)
//   GET /admin/instances   every instance's state, load and history (admin key)
//   GET /admin/history     the last ten minutes of traffic in 10 s buckets (traffic_history.h; admin key)
//   POST /admin/instances/{id}/drain, /resume   stop or resume sending it new requests (admin key)
//   GET /admin/canary      the canary release: state, stage, figures, decisions (admin key; 404 without one)
//   POST /admin/canary/promote, /rollback       an operator's decision (admin key)

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "router/canary_release.h"
#include "router/instance_pool.h"
#include "router/traffic_history.h"
#include "router/upstream_client.h"
#include "server/admission.h"
#include "server/api_keys.h"
#include "server/http_server.h"

namespace ds {

class RouterService : public HttpService {
 public:
  // `admin_keys`: null when the router has none (the admin routes answer 403);
  // `canary`: the release when the config has one, else null.
  // `history`: fed every answered request (the instances' scrapes feed it too).
  RouterService(InstancePool& pool, UpstreamClient& client, Admission& admission, std::optional<KeyFile> admin_keys, CanaryRelease* canary,
                TrafficHistory& history);

  std::optional<HttpRefusal> check_head(const HttpRequest& head) override;
  void handle(HttpRequest request, std::shared_ptr<HttpExchange> exchange) override;
  void refused(const HttpRequest& head, int status, const std::string& reason) override;

 private:
  struct Forward;
  void forward(std::shared_ptr<Forward> f);

  std::string metrics_text() const;
  void count(const std::string& instance, int status);

  InstancePool& pool_;
  UpstreamClient& client_;
  Admission& admission_;
  std::optional<KeyFile> admin_keys_;
  CanaryRelease* canary_;
  TrafficHistory& history_;
  static constexpr int64_t k_max_shadows_in_flight = 64;
  std::atomic<int64_t> shadows_in_flight_{0};  // shadow copies sent and not yet answered
  mutable std::mutex metrics_mutex_;  // guards the two below
  std::map<std::pair<std::string, int>, int64_t> answered_;  // (instance or "-", status) -> requests
  int64_t retries_ = 0;
};

}  // namespace ds
