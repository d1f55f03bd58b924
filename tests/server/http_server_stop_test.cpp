// HttpServer::stop: an answer being written when the server stops reaches its
// client whole; an idle connection is closed at once; a client that never
// reads holds the stop for no longer than the grace.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "server/http_server.h"

namespace ds {
namespace {

// Far more than the loopback socket buffers hold, so most of the answer is
// still in the server's queue when stop() is called.
constexpr size_t k_answer_bytes = 8 << 20;

class LargeAnswerService : public HttpService {
 public:
  std::optional<HttpRefusal> check_head(const HttpRequest&) override { return std::nullopt; }
  void handle(HttpRequest, std::shared_ptr<HttpExchange> exchange) override {
    exchange->respond(200, "text/plain", std::string(k_answer_bytes, 'x'));
    answered.set_value();
  }
  void refused(const HttpRequest&, int, const std::string&) override {}

  std::promise<void> answered;
};

std::unique_ptr<HttpServer> start_server(HttpService& service) {
  HttpServerOptions options;
  options.port = 0;
  options.max_unsent_bytes = 2 * k_answer_bytes;
  auto server = HttpServer::start(options, service);
  EXPECT_TRUE(server.ok()) << server.message();
  return std::move(server.value());
}

// Only a guard against a hang: a read that waits this long fails the test
// (read_to_end's `closed` stays false) instead of blocking it for good.
constexpr timeval k_read_guard{60, 0};

int connect_to(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &k_read_guard, sizeof k_read_guard);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  return fd;
}

void send_request(int fd) {
  const std::string request = "GET /large HTTP/1.1\r\nHost: test\r\n\r\n";
  ASSERT_EQ(write(fd, request.data(), request.size()), ssize_t(request.size()));
}

struct Received {
  std::string bytes;
  bool closed = false;  // the server closed the connection (not the read guard)
};

// Everything the server sends until it closes the connection.
Received read_to_end(int fd) {
  Received r;
  char buffer[1 << 16];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof buffer)) > 0) r.bytes.append(buffer, size_t(n));
  r.closed = n == 0;
  return r;
}

TEST(HttpServerStop, AnAnswerBeingWrittenArrivesWhole) {
  LargeAnswerService service;
  auto server = start_server(service);
  const int fd = connect_to(server->port());
  send_request(fd);
  service.answered.get_future().wait();  // queued, and unread: the client has not started reading

  std::thread stopper([&] { server->stop(std::chrono::seconds(60)); });
  const Received r = read_to_end(fd);
  stopper.join();
  close(fd);
  EXPECT_TRUE(r.closed);
  const std::string& received = r.bytes;

  const size_t head_end = received.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos);
  EXPECT_NE(received.find("Content-Length: " + std::to_string(k_answer_bytes)), std::string::npos);
  EXPECT_EQ(received.size() - (head_end + 4), k_answer_bytes);
}

TEST(HttpServerStop, AnIdleConnectionIsClosedWithoutWaitingForTheGrace) {
  LargeAnswerService service;
  auto server = start_server(service);
  const int fd = connect_to(server->port());
  // The server has accepted it once a stats() call counts it (accepting is asynchronous).
  while (server->stats().open_connections == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));

  // Were the idle connection waited for, the read guard would end the read
  // unclosed, and stop would return only after the grace.
  std::thread stopper([&] { server->stop(std::chrono::minutes(2)); });
  const Received r = read_to_end(fd);
  EXPECT_TRUE(r.closed);
  EXPECT_EQ(r.bytes, "");  // closed with nothing sent
  stopper.join();
  close(fd);
}

TEST(HttpServerStop, AClientThatNeverReadsIsCutAfterTheGrace) {
  LargeAnswerService service;
  auto server = start_server(service);
  const int fd = connect_to(server->port());
  send_request(fd);
  service.answered.get_future().wait();

  server->stop(std::chrono::milliseconds(50));  // returns: the connection is cut, not waited for
  const Received r = read_to_end(fd);
  close(fd);
  EXPECT_TRUE(r.closed);
  const std::string& received = r.bytes;
  const size_t head_end = received.find("\r\n\r\n");
  ASSERT_NE(head_end, std::string::npos);
  EXPECT_LT(received.size() - (head_end + 4), k_answer_bytes);
}

}  // namespace
}  // namespace ds
