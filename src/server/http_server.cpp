#include "server/http_server.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "base/log.h"

namespace ds {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

const char* http_reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
  }
}

namespace {

std::string response_head(int status, const std::string& content_type, const HttpHeaders& extra, bool keep_alive) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + http_reason(status) + "\r\n";
  head += "Content-Type: " + content_type + "\r\n";
  head += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [name, value] : extra) head += name + ": " + value + "\r\n";
  return head;
}

std::string error_body(const std::string& message, const char* type) {
  // The OpenAI error shape, built by hand: this layer knows no JSON library.
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  }
  return std::string("{\"error\":{\"message\":\"") + escaped + "\",\"type\":\"" + type + "\",\"param\":null,\"code\":null}}";
}

class Connection : public HttpExchange, public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const HttpServerOptions& options, const HttpHandler& handler)
      : stream_(std::move(socket)), idle_timer_(stream_.get_executor()), options_(options), handler_(handler) {}

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_next(); });
  }

  void close() {
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->shut(); });
  }

  // HttpExchange
  void post(std::function<void()> fn) override { net::post(stream_.get_executor(), std::move(fn)); }

  void after(std::chrono::milliseconds delay, std::function<void()> fn) override {
    auto timer = std::make_shared<net::steady_timer>(stream_.get_executor(), delay);
    timers_.push_back(timer);  // cancelled when the response ends, so nothing waits out the delay
    const uint64_t response = response_serial_;
    timer->async_wait([self = shared_from_this(), timer, response, fn = std::move(fn)](beast::error_code ec) {
      if (!ec && self->responding_ && self->response_serial_ == response) fn();
    });
  }

  void respond(int status, const std::string& content_type, const std::string& body, const HttpHeaders& extra) override {
    if (!responding_ || closed_) return;
    std::string out = response_head(status, content_type, extra, keep_alive_);
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    out += body;
    send(std::move(out));
    finish_response();
  }

  void begin_stream(int status, const std::string& content_type, const HttpHeaders& extra) override {
    if (!responding_ || closed_) return;
    std::string out = response_head(status, content_type, extra, keep_alive_);
    out += "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n";
    send(std::move(out));
  }

  void write_chunk(const std::string& data) override {
    if (!responding_ || closed_ || data.empty()) return;
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    send(size + data + "\r\n");
  }

  void end_stream() override {
    if (!responding_ || closed_) return;
    send("0\r\n\r\n");
    finish_response();
  }

  void on_disconnect(std::function<void()> fn) override { on_disconnect_ = std::move(fn); }
  bool disconnected() const override { return closed_; }

 private:
  void read_next() {
    if (closed_ || reading_) return;
    reading_ = true;
    parser_.emplace();
    parser_->body_limit(options_.max_body_bytes);
    parser_->header_limit(64 * 1024);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    reading_ = false;
    if (closed_) return;
    if (ec) {
      if (ec == http::error::body_limit) return reject_and_close(413, "request body exceeds " + std::to_string(options_.max_body_bytes) + " bytes");
      if (ec == http::error::header_limit) return reject_and_close(431, "request headers are too large");
      if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
          ec == net::error::operation_aborted || ec == net::error::bad_descriptor) {
        return client_gone();
      }
      return reject_and_close(400, "malformed HTTP request: " + ec.message());
    }
    idle_timer_.cancel();
    http::request<http::string_body> message = parser_->release();
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    for (const auto& field : message) {
      std::string name(field.name_string());
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      request.headers[name] = std::string(field.value());
    }
    request.body = std::move(message.body());
    beast::error_code endpoint_error;
    const auto remote = stream_.socket().remote_endpoint(endpoint_error);
    if (!endpoint_error) request.remote_address = remote.address().to_string();
    const bool keep_alive = message.keep_alive();
    if (responding_) {
      pending_.emplace_back(std::move(request), keep_alive);  // pipelined: answered after the current one
      return;
    }
    dispatch(std::move(request), keep_alive);
  }

  void dispatch(HttpRequest request, bool keep_alive) {
    responding_ = true;
    keep_alive_ = keep_alive;
    ++response_serial_;
    on_disconnect_ = nullptr;
    read_next();  // read ahead: EOF while responding means the client left
    try {
      handler_(std::move(request), shared_from_this());
    } catch (const std::exception& e) {
      DS_LOG_ERROR("http handler failed: %s", e.what());
      respond(500, "application/json", error_body("internal error", "server_error"), {});
    }
  }

  void cancel_timers() {
    for (auto& timer : timers_) timer->cancel();
    timers_.clear();
  }

  void finish_response() {
    responding_ = false;
    on_disconnect_ = nullptr;
    cancel_timers();
    if (!keep_alive_) {
      close_after_write_ = true;
      if (!writing_) shut();
      return;
    }
    if (!pending_.empty()) {
      auto [request, keep_alive] = std::move(pending_.front());
      pending_.pop_front();
      dispatch(std::move(request), keep_alive);
      return;
    }
    read_next();
    idle_timer_.expires_after(options_.idle_timeout);
    idle_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec && !self->responding_) self->shut();
    });
  }

  void reject_and_close(int status, const std::string& message) {
    pending_.clear();
    if (responding_) return client_gone();  // a response is in flight: nothing more can be said in order
    responding_ = true;
    keep_alive_ = false;
    respond(status, "application/json", error_body(message, "invalid_request_error"), {});
  }

  void client_gone() {
    if (responding_ && on_disconnect_) {
      auto fn = std::move(on_disconnect_);
      on_disconnect_ = nullptr;
      closed_ = true;
      fn();
    }
    shut();
  }

  void send(std::string data) {
    out_.push_back(std::move(data));
    if (!writing_) write_front();
  }

  void write_front() {
    writing_ = true;
    net::async_write(stream_, net::buffer(out_.front()), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->out_.pop_front();
      self->writing_ = false;
      if (ec) return self->client_gone();
      if (!self->out_.empty()) return self->write_front();
      if (self->close_after_write_) self->shut();
    });
  }

  void shut() {
    if (shut_) return;
    closed_ = true;
    shut_ = true;
    idle_timer_.cancel();
    cancel_timers();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  net::steady_timer idle_timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  const HttpServerOptions& options_;
  const HttpHandler& handler_;
  std::deque<std::string> out_;
  std::deque<std::pair<HttpRequest, bool>> pending_;
  std::function<void()> on_disconnect_;
  std::vector<std::shared_ptr<net::steady_timer>> timers_;
  uint64_t response_serial_ = 0;
  bool reading_ = false, writing_ = false, responding_ = false, keep_alive_ = true;
  bool close_after_write_ = false, closed_ = false, shut_ = false;
};

class BeastServer : public HttpServer {
 public:
  BeastServer(const HttpServerOptions& options, HttpHandler handler)
      : options_(options), handler_(std::move(handler)), acceptor_(net::make_strand(ioc_)), signals_(ioc_, SIGTERM, SIGINT) {}

  ~BeastServer() override { stop(); }

  Status open() {
    beast::error_code ec;
    const auto address = net::ip::make_address(options_.host, ec);
    if (ec) return Status::error("--host '" + options_.host + "' is not an IP address");
    const tcp::endpoint endpoint(address, options_.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) return Status::error("cannot listen on " + options_.host + ":" + std::to_string(options_.port) + ": " + ec.message());
    port_ = acceptor_.local_endpoint().port();
    accept();
    signals_.async_wait([this](beast::error_code ec, int signal) {
      if (!ec && on_signal_) on_signal_(signal);
    });
    for (int i = 0; i < std::max(1, options_.n_threads); ++i) threads_.emplace_back([this] { ioc_.run(); });
    return Status();
  }

  uint16_t port() const override { return port_; }
  void on_shutdown_signal(std::function<void(int)> fn) override { on_signal_ = std::move(fn); }

  void stop() override {
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return;
      stopped_ = true;
    }
    net::post(acceptor_.get_executor(), [this] {
      beast::error_code ignored;
      acceptor_.close(ignored);
      signals_.cancel(ignored);
    });
    {
      std::lock_guard lock(connections_mutex_);
      for (auto& weak : connections_) {
        if (auto c = weak.lock()) c->close();
      }
    }
    ioc_.stop();
    for (auto& t : threads_) {
      if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
    }
    stopped_cv_.notify_all();
  }

  void wait() override {
    std::unique_lock lock(mutex_);
    stopped_cv_.wait(lock, [&] { return stopped_; });
  }

 private:
  void accept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        auto connection = std::make_shared<Connection>(std::move(socket), options_, handler_);
        {
          std::lock_guard lock(connections_mutex_);
          // Forget connections that are gone, so the list stays as long as the open ones.
          std::erase_if(connections_, [](const std::weak_ptr<Connection>& w) { return w.expired(); });
          connections_.push_back(connection);
        }
        connection->start();
      }
      accept();
    });
  }

  HttpServerOptions options_;
  HttpHandler handler_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  net::signal_set signals_;
  std::function<void(int)> on_signal_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  std::mutex connections_mutex_;
  std::vector<std::weak_ptr<Connection>> connections_;
  std::mutex mutex_;
  std::condition_variable stopped_cv_;
  bool stopped_ = false;
};

}  // namespace

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpServerOptions& options, HttpHandler handler) {
  auto server = std::make_unique<BeastServer>(options, std::move(handler));
  DS_RETURN_IF_ERROR(server->open());
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace ds
