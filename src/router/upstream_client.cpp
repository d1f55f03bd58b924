#include "router/upstream_client.h"

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <mutex>
#include <optional>

namespace ds {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

std::string header_value(const HttpHeaders& headers, const std::string& name) {
  for (const auto& [n, value] : headers) {
    if (boost::beast::iequals(n, name)) return value;
  }
  return "";
}

Result<Endpoint> parse_endpoint_url(const std::string& url) {
  const std::string prefix = "http://";
  if (url.rfind(prefix, 0) != 0) return Status::error("'" + url + "' is not an http:// URL");
  const std::string rest = url.substr(prefix.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || rest.find('/') != std::string::npos) {
    return Status::error("'" + url + "' must be http://HOST:PORT, without a path");
  }
  Endpoint e;
  e.host = rest.substr(0, colon);
  char* end = nullptr;
  const long port = std::strtol(rest.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port < 1 || port > 65535) return Status::error("'" + url + "': the port must be 1..65535");
  e.port = uint16_t(port);
  beast::error_code ec;
  net::ip::make_address(e.host == "localhost" ? "127.0.0.1" : e.host, ec);
  if (ec) return Status::error("'" + url + "': the host must be an IP address (or localhost)");
  return e;
}

namespace {

tcp::endpoint endpoint_of(const Endpoint& e) {
  return {net::ip::make_address(e.host == "localhost" ? "127.0.0.1" : e.host), e.port};
}

http::request<http::string_body> make_request(const Endpoint& to, const std::string& method, const std::string& target,
                                              const HttpHeaders& headers, const std::string& body) {
  http::request<http::string_body> request{http::string_to_verb(method), target, 11};
  request.set(http::field::host, to.text());
  for (const auto& [name, value] : headers) request.set(name, value);
  request.set(http::field::connection, "close");
  request.body() = body;
  request.prepare_payload();
  return request;
}

HttpHeaders headers_of(const http::response_header<>& head) {
  HttpHeaders headers;
  for (const auto& field : head) headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  return headers;
}

// One forwarded request, on its own strand.
class Call : public UpstreamCall, public std::enable_shared_from_this<Call> {
 public:
  Call(net::io_context& ioc, UpstreamClient::Handlers handlers)
      : socket_(net::make_strand(ioc)), timer_(socket_.get_executor()), handlers_(std::move(handlers)) {}

  void start(const Endpoint& to, http::request<http::string_body> request, std::chrono::milliseconds connect_timeout) {
    request_ = std::move(request);
    net::dispatch(socket_.get_executor(), [self = shared_from_this(), to, connect_timeout] {
      self->timer_.expires_after(connect_timeout);
      self->timer_.async_wait([self](beast::error_code ec) {
        if (!ec && !self->connected_) self->fail("connect timed out");
      });
      self->socket_.async_connect(endpoint_of(to), [self](beast::error_code ec) {
        self->connected_ = true;
        self->timer_.cancel();
        if (ec) return self->fail("connect: " + ec.message());
        http::async_write(self->socket_, self->request_, [self](beast::error_code ec, size_t) {
          if (ec) return self->fail("send: " + ec.message());
          self->parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
          http::async_read_header(self->socket_, self->buffer_, self->parser_, [self](beast::error_code ec, size_t) {
            if (ec) return self->fail("response head: " + ec.message());
            self->got_head_ = true;
            if (!self->ended_) self->handlers_.on_head(int(self->parser_.get().result_int()), headers_of(self->parser_.get().base()));
            self->read_body();
          });
        });
      });
    });
  }

  void cancel() override {
    net::post(socket_.get_executor(), [self = shared_from_this()] {
      self->ended_ = true;
      beast::error_code ignored;
      self->socket_.close(ignored);
      self->timer_.cancel();
    });
  }

 private:
  void read_body() {
    if (ended_) return;
    if (parser_.is_done()) return end();
    parser_.get().body().data = piece_.data();
    parser_.get().body().size = piece_.size();
    http::async_read_some(socket_, buffer_, parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec == http::error::need_buffer) ec = {};
      const size_t n = self->piece_.size() - self->parser_.get().body().size;
      if (n > 0 && !self->ended_) self->handlers_.on_body(std::string(self->piece_.data(), n));
      if (ec == http::error::end_of_stream && self->parser_.is_done()) return self->end();
      if (ec) return self->fail("response body: " + ec.message());
      self->read_body();
    });
  }

  void end() {
    if (ended_) return;
    ended_ = true;
    handlers_.on_end();
    beast::error_code ignored;
    socket_.close(ignored);
  }

  void fail(const std::string& error) {
    if (ended_) return;
    ended_ = true;
    beast::error_code ignored;
    socket_.close(ignored);
    handlers_.on_error(error, got_head_);
  }

  tcp::socket socket_;
  net::steady_timer timer_;
  UpstreamClient::Handlers handlers_;
  http::request<http::string_body> request_;
  beast::flat_buffer buffer_;
  http::response_parser<http::buffer_body> parser_;
  std::array<char, 16384> piece_{};
  bool connected_ = false, got_head_ = false, ended_ = false;
};

}  // namespace

struct UpstreamClient::Impl {
  net::io_context ioc;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work{ioc.get_executor()};
  std::vector<std::thread> threads;
};

UpstreamClient::UpstreamClient(int n_threads) : impl_(std::make_unique<Impl>()) {
  for (int i = 0; i < std::max(1, n_threads); ++i) impl_->threads.emplace_back([this] { impl_->ioc.run(); });
}

UpstreamClient::~UpstreamClient() { stop(); }

void UpstreamClient::stop() {
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) {
    if (t.joinable()) t.join();
  }
}

std::shared_ptr<UpstreamCall> UpstreamClient::send(const Endpoint& to, const std::string& method, const std::string& target,
                                                   const HttpHeaders& headers, const std::string& body, Handlers handlers,
                                                   std::chrono::milliseconds connect_timeout) {
  auto call = std::make_shared<Call>(impl_->ioc, std::move(handlers));
  call->start(to, make_request(to, method, target, headers, body), connect_timeout);
  return call;
}

Result<std::pair<int, std::string>> UpstreamClient::request(const Endpoint& to, const std::string& method, const std::string& path,
                                                            const std::string& body, std::chrono::milliseconds timeout,
                                                            const HttpHeaders& headers) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.expires_after(timeout);
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  HttpHeaders all = headers;
  if (!body.empty()) all.emplace_back("Content-Type", "application/json");
  http::request<http::string_body> request = make_request(to, method, path, all, body);
  std::string error;
  bool done = false;
  stream.async_connect(endpoint_of(to), [&](beast::error_code ec) {
    if (ec) return void(error = "connect: " + ec.message());
    http::async_write(stream, request, [&](beast::error_code ec, size_t) {
      if (ec) return void(error = "send: " + ec.message());
      http::async_read(stream, buffer, response, [&](beast::error_code ec, size_t) {
        if (ec) return void(error = "response: " + ec.message());
        done = true;
      });
    });
  });
  ioc.run();  // every operation above is bounded by the stream's expiry
  if (!done) return Status::error(error.empty() ? "no answer" : error);
  return std::pair<int, std::string>(int(response.result_int()), response.body());
}

}  // namespace ds
