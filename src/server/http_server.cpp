#include "server/http_server.h"

#include <sys/resource.h>

#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <deque>
#include <future>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "base/log.h"

namespace ds {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

const char* http_reason(int status) {
  switch (status) {
    case 100: return "Continue";
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

constexpr size_t k_max_request_id = 128;
constexpr auto k_linger_time = std::chrono::seconds(2);  // reading what a refused client still sends

std::string response_head(int status, const std::string& content_type, const HttpHeaders& extra, bool keep_alive,
                          const std::string& request_id) {
  std::string head = "HTTP/1.1 " + std::to_string(status) + " " + http_reason(status) + "\r\n";
  head += "Content-Type: " + content_type + "\r\n";
  head += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  if (!request_id.empty()) head += "X-Request-Id: " + request_id + "\r\n";
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

std::string new_request_id() {
  static std::atomic<uint64_t> counter{std::random_device{}() * 0x9E3779B97F4A7C15ull};
  uint64_t z = counter.fetch_add(0x9E3779B97F4A7C15ull);  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(z));
  return id;
}

bool valid_request_id(const std::string& id) {
  if (id.empty() || id.size() > k_max_request_id) return false;
  for (unsigned char c : id) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

// The request's line and headers (no body) as the service sees them.
template <class Message>
HttpRequest request_head(const Message& message) {
  HttpRequest request;
  request.method = std::string(message.method_string());
  request.target = std::string(message.target());
  for (const auto& field : message) {
    std::string name(field.name_string());
    for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    request.headers[name] = std::string(field.value());
  }
  const std::string client_id = request.header("x-request-id");
  request.request_id = valid_request_id(client_id) ? client_id : new_request_id();
  return request;
}

template <class Parser>
void apply_limits(Parser& parser, const HttpServerOptions& options) {
  parser.body_limit(options.max_body_bytes);
  parser.header_limit(uint32_t(options.max_header_bytes));
}

// Open connections in all and per client address.
class ConnectionCaps {
 public:
  ConnectionCaps(int max_total, int max_per_address) : max_total_(max_total), max_per_address_(max_per_address) {}

  bool try_acquire(const std::string& address) {
    std::lock_guard lock(mutex_);
    int& n = per_address_[address];
    if (total_ >= max_total_ || n >= max_per_address_) {
      if (n == 0) per_address_.erase(address);
      return false;
    }
    ++n;
    ++total_;
    return true;
  }

  void release(const std::string& address) {
    std::lock_guard lock(mutex_);
    auto it = per_address_.find(address);
    if (it == per_address_.end()) return;
    if (--it->second == 0) per_address_.erase(it);
    --total_;
  }

  int64_t open() const {
    std::lock_guard lock(mutex_);
    return total_;
  }

 private:
  const int max_total_, max_per_address_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, int> per_address_;
  int total_ = 0;
};

// Logs a repeated condition at most once a second.
class RateLimitedWarning {
 public:
  void warn(const char* what, int64_t count) {
    const auto now = Clock::now();
    std::lock_guard lock(mutex_);
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    DS_LOG_WARN("%s (%lld so far)", what, (long long)count);
  }

 private:
  std::mutex mutex_;
  Clock::time_point last_{};
};

class Connection : public HttpExchange, public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::string address, const HttpServerOptions& options, HttpService& service,
             std::shared_ptr<ConnectionCaps> caps)
      : stream_(std::move(socket)),
        read_deadline_(stream_.get_executor()),
        write_deadline_(stream_.get_executor()),
        address_(std::move(address)),
        // Unparsed bytes only (a body moves into its string as it parses): a
        // head plus a read's worth. Bounds what a chunk header or extension
        // that never ends can cost.
        buffer_(2 * options.max_header_bytes + (64 << 10)),
        options_(options),
        service_(service),
        caps_(std::move(caps)) {}

  ~Connection() override { release_slot(); }

  void start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->want_read(); });
  }

  void close() {
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->shut(); });
  }

  // The server is stopping: an idle connection closes now; one answering
  // finishes that answer, sends the rest of it and then closes (its head said
  // keep-alive; the FIN after the answer says otherwise). Nothing more is read.
  void wind_down() {
    net::post(stream_.get_executor(), [self = shared_from_this()] { self->close_after_answer(); });
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
    std::string out = response_head(status, content_type, extra, keep_alive_, request_id_);
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    out += body;
    send(std::move(out));
    finish_response();
  }

  void begin_stream(int status, const std::string& content_type, const HttpHeaders& extra) override {
    if (!responding_ || closed_) return;
    std::string out = response_head(status, content_type, extra, keep_alive_, request_id_);
    out += "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n";
    send(std::move(out));
  }

  void write_chunk(const std::string& data) override {
    if (!responding_ || closed_ || data.empty()) return;
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    send(size + data + "\r\n");
    // A client that reads nothing while its stream goes on is gone for our purposes.
    if (unsent_bytes_ > options_.max_unsent_stream_bytes) client_gone();
  }

  void end_stream() override {
    if (!responding_ || closed_) return;
    send("0\r\n\r\n");
    finish_response();
  }

  void on_disconnect(std::function<void()> fn) override { on_disconnect_ = std::move(fn); }
  bool disconnected() const override { return closed_; }

 private:
  enum class ReadState { none, waiting, head, body, lingering };

  // A request read ahead while another was being answered; a refusal is
  // answered in its turn and closes the connection.
  struct Pending {
    HttpRequest request;
    bool keep_alive = true;
    std::optional<HttpRefusal> refusal;
  };

  bool idle() const { return !responding_ && pending_.empty(); }

  bool reading_paused() const {
    return stop_reading_ || int(pending_.size()) >= options_.max_pipelined || pending_bytes_ >= options_.max_body_bytes ||
           unsent_bytes_ >= options_.max_unsent_bytes;
  }

  // Starts the next read if none is running. Past the bounds (or after a
  // last request) nothing more is parsed, but the socket is still watched
  // for the client leaving.
  void want_read() {
    if (closed_ || read_state_ != ReadState::none) return;
    const bool paused = reading_paused();
    if (paused && data_waiting_) return;  // watching again would wake at once, forever
    if (!paused && buffer_.size() > 0) return read_head();
    read_state_ = ReadState::waiting;
    arm_read_deadline();
    stream_.socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (self->read_state_ != ReadState::waiting) return;
      self->read_state_ = ReadState::none;
      if (self->closed_) return;
      if (ec) return self->client_gone();
      if (self->reading_paused()) return self->check_for_eof();
      self->read_head();
    });
  }

  // The socket is readable while we may not read: EOF means the client left.
  // The socket is non-blocking (admit): a wake with nothing to read after all
  // must not block this strand, and with it the responses it carries, until
  // the client next sends or leaves.
  void check_for_eof() {
    char byte;
    beast::error_code ec;
    const size_t n = stream_.socket().receive(net::buffer(&byte, 1), tcp::socket::message_peek, ec);
    if (ec == net::error::would_block || ec == net::error::try_again) return want_read();
    if (ec || n == 0) return client_gone();
    data_waiting_ = true;
  }

  void read_head() {
    data_waiting_ = false;
    read_state_ = ReadState::head;
    parser_.emplace();
    apply_limits(*parser_, options_);
    // The Content-Length is judged in on_head, where the request has its id.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    arm_read_deadline();
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) { self->on_head(ec); });
  }

  void on_head(beast::error_code ec) {
    if (read_state_ != ReadState::head) return;
    read_state_ = ReadState::none;
    if (closed_) return;
    if (ec) return on_read_error(ec, false);
    head_ = request_head(parser_->get());
    head_.remote_address = address_;
    head_keep_alive_ = parser_->get().keep_alive();
    if (const auto length = parser_->content_length(); length && *length > options_.max_body_bytes) {
      return reject(std::move(head_), 413, "request body exceeds " + std::to_string(options_.max_body_bytes) + " bytes", "body_too_large");
    }
    if (auto refusal = service_.check_head(head_)) return refuse(std::move(head_), std::move(*refusal));
    parser_->body_limit(options_.max_body_bytes);  // for chunked bodies, while they stream in
    if (parser_->is_done()) return complete();
    if (beast::iequals(parser_->get()[http::field::expect], "100-continue") && idle() && unsent_bytes_ == 0) {
      send("HTTP/1.1 100 Continue\r\n\r\n");
    }
    read_state_ = ReadState::body;
    arm_read_deadline();
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (self->read_state_ != ReadState::body) return;
      self->read_state_ = ReadState::none;
      if (self->closed_) return;
      if (ec) return self->on_read_error(ec, true);
      self->complete();
    });
  }

  // reading_body: the head was taken (head_ describes the request).
  void on_read_error(beast::error_code ec, bool reading_body) {
    if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
        ec == net::error::operation_aborted || ec == net::error::bad_descriptor || ec == net::error::broken_pipe) {
      return client_gone();
    }
    HttpRequest head = reading_body ? head_ : HttpRequest{};
    head.remote_address = address_;
    if (head.request_id.empty()) head.request_id = new_request_id();
    if (ec == http::error::body_limit) {
      return reject(std::move(head), 413, "request body exceeds " + std::to_string(options_.max_body_bytes) + " bytes", "body_too_large");
    }
    if (ec == http::error::header_limit) return reject(std::move(head), 431, "request headers are too large", "headers_too_large");
    return reject(std::move(head), 400, "malformed HTTP request: " + ec.message(), "malformed_http");
  }

  void complete() {
    HttpRequest request = std::move(head_);
    request.body = parser_->release().body();
    if (!idle()) {
      pending_bytes_ += request.body.size();
      pending_.push_back(Pending{std::move(request), head_keep_alive_, std::nullopt});
      return want_read();
    }
    dispatch(std::move(request), head_keep_alive_);
  }

  void dispatch(HttpRequest request, bool keep_alive) {
    responding_ = true;
    keep_alive_ = keep_alive;
    request_id_ = request.request_id;
    ++response_serial_;
    on_disconnect_ = nullptr;
    served_any_ = true;
    disarm_read_deadline();
    if (!keep_alive) stop_reading_ = true;
    want_read();  // read ahead: EOF while responding means the client left
    try {
      service_.handle(std::move(request), shared_from_this());
    } catch (const std::exception& e) {
      DS_LOG_ERROR("http handler failed: %s", e.what());
      respond(500, "application/json", error_body("internal error", "server_error"), {});
    }
  }

  // Answers a request without reading (the rest of) it, in its turn, then closes.
  void refuse(HttpRequest head, HttpRefusal refusal) {
    stop_reading_ = true;
    if (!idle()) {
      pending_.push_back(Pending{std::move(head), false, std::move(refusal)});
      return;
    }
    answer_refusal(std::move(head), std::move(refusal));
  }

  void answer_refusal(HttpRequest head, HttpRefusal refusal) {
    responding_ = true;
    keep_alive_ = false;
    linger_ = true;
    request_id_ = head.request_id;
    ++response_serial_;
    disarm_read_deadline();
    respond(refusal.status, "application/json", refusal.body, refusal.headers);
  }

  // A refusal of this layer's own (the service's are logged by the service).
  void reject(HttpRequest head, int status, const std::string& message, const std::string& reason) {
    service_.refused(head, status, reason);
    std::string body = service_.refusal_body(head, status, message);
    refuse(std::move(head), HttpRefusal{status, std::move(body), {}, reason});
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
      pending_.clear();
      close_after_write_ = true;
      if (!writing_) close_gracefully();
      return;
    }
    next_request();
  }

  // After a response: the next queued request once the unsent bytes allow,
  // else back to reading with the deadline of whatever the read waits for.
  void next_request() {
    if (responding_ || closed_ || close_after_write_) return;
    if (!pending_.empty()) {
      if (unsent_bytes_ >= options_.max_unsent_bytes) return;  // resumed when writes drain
      Pending next = std::move(pending_.front());
      pending_.pop_front();
      pending_bytes_ -= std::min(pending_bytes_, next.request.body.size());
      if (next.refusal) return answer_refusal(std::move(next.request), std::move(*next.refusal));
      return dispatch(std::move(next.request), next.keep_alive);
    }
    arm_read_deadline();
    want_read();
  }

  // The read deadline applies only while the connection waits for its client:
  // idle with a read running.
  void arm_read_deadline() {
    if (!idle() || closed_) return;
    std::chrono::milliseconds limit{};
    switch (read_state_) {
      case ReadState::waiting: limit = served_any_ ? options_.keepalive_timeout : options_.head_timeout; break;
      case ReadState::head: limit = options_.head_timeout; break;
      case ReadState::body: limit = options_.body_timeout; break;
      case ReadState::lingering: limit = k_linger_time; break;
      case ReadState::none: return;
    }
    read_deadline_.expires_after(limit);
    const uint64_t serial = ++read_deadline_serial_;
    const ReadState state = read_state_;
    read_deadline_.async_wait([self = shared_from_this(), serial, state](beast::error_code ec) {
      if (ec || serial != self->read_deadline_serial_ || self->read_state_ != state || self->closed_) return;
      self->on_read_deadline();
    });
  }

  void disarm_read_deadline() {
    ++read_deadline_serial_;
    read_deadline_.cancel();
  }

  void on_read_deadline() {
    switch (read_state_) {
      case ReadState::waiting:
      case ReadState::lingering:
      case ReadState::none: return shut();
      case ReadState::head: {
        if (!parser_->got_some() && buffer_.size() == 0) return shut();  // nothing sent: no request to answer
        HttpRequest head;
        head.remote_address = address_;
        head.request_id = new_request_id();
        return timed_out(std::move(head), "the request head did not arrive within " + seconds(options_.head_timeout), "head_timeout");
      }
      case ReadState::body:
        return timed_out(head_, "the request body did not arrive within " + seconds(options_.body_timeout), "body_timeout");
    }
  }

  void timed_out(HttpRequest head, const std::string& message, const std::string& reason) {
    read_state_ = ReadState::none;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);  // the read ends; what it had is dropped
    reject(std::move(head), 408, message, reason);
  }

  static std::string seconds(std::chrono::milliseconds d) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g s", double(d.count()) / 1000.0);
    return text;
  }

  void close_after_answer() {
    if (closed_) return;
    pending_.clear();
    pending_bytes_ = 0;
    stop_reading_ = true;
    if (responding_) {
      keep_alive_ = false;  // finish_response closes once the answer is written
    } else if (writing_) {
      close_after_write_ = true;  // the last bytes of a finished answer
    } else {
      shut();
    }
  }

  void client_gone() {
    pending_.clear();
    if (responding_ && on_disconnect_) {
      auto fn = std::move(on_disconnect_);
      on_disconnect_ = nullptr;
      closed_ = true;
      fn();
    }
    shut();
  }

  void send(std::string data) {
    unsent_bytes_ += data.size();
    out_.push_back(std::move(data));
    if (!writing_) write_front();
  }

  void write_front() {
    writing_ = true;
    write_deadline_.expires_after(options_.send_timeout);
    write_deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec && self->writing_) self->client_gone();  // no progress for send_timeout
    });
    const std::string& front = out_.front();
    stream_.socket().async_write_some(
        net::buffer(front.data() + front_offset_, front.size() - front_offset_),
        [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_written(ec, n); });
  }

  void on_written(beast::error_code ec, size_t n) {
    writing_ = false;
    write_deadline_.cancel();
    if (closed_) return;
    if (ec) return client_gone();
    front_offset_ += n;
    unsent_bytes_ -= n;
    if (front_offset_ == out_.front().size()) {
      out_.pop_front();
      front_offset_ = 0;
    }
    if (!out_.empty()) return write_front();
    if (close_after_write_) return close_gracefully();
    next_request();
    want_read();
  }

  // Sends FIN, then reads and drops what the client still sends for a while,
  // so that a client still writing its body reads our answer rather than a
  // reset (nginx's lingering close).
  void close_gracefully() {
    if (!linger_) return shut();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    if (read_state_ != ReadState::none) {
      stream_.socket().cancel(ignored);
      read_state_ = ReadState::none;
    }
    read_state_ = ReadState::lingering;
    arm_read_deadline();
    discard();
  }

  void discard() {
    if (!scratch_) scratch_ = std::make_unique<std::array<char, 16384>>();
    stream_.socket().async_read_some(net::buffer(*scratch_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (self->closed_ || self->read_state_ != ReadState::lingering) return;
      self->lingered_bytes_ += n;
      if (ec || self->lingered_bytes_ > self->options_.max_body_bytes) return self->shut();
      self->discard();
    });
  }

  void release_slot() {
    if (slot_released_) return;
    slot_released_ = true;
    caps_->release(address_);
  }

  void shut() {
    if (shut_) return;
    closed_ = true;
    shut_ = true;
    pending_.clear();
    disarm_read_deadline();
    write_deadline_.cancel();
    cancel_timers();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    release_slot();
  }

  beast::tcp_stream stream_;
  net::steady_timer read_deadline_, write_deadline_;
  const std::string address_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest head_;  // the request whose body is being read
  bool head_keep_alive_ = true;
  const HttpServerOptions& options_;
  HttpService& service_;
  std::shared_ptr<ConnectionCaps> caps_;
  std::deque<std::string> out_;
  size_t front_offset_ = 0, unsent_bytes_ = 0;
  std::deque<Pending> pending_;
  size_t pending_bytes_ = 0;
  std::function<void()> on_disconnect_;
  std::vector<std::shared_ptr<net::steady_timer>> timers_;
  std::string request_id_;  // of the response being written
  uint64_t response_serial_ = 0, read_deadline_serial_ = 0;
  ReadState read_state_ = ReadState::none;
  std::unique_ptr<std::array<char, 16384>> scratch_;  // lingering only
  size_t lingered_bytes_ = 0;
  bool writing_ = false, responding_ = false, keep_alive_ = true, served_any_ = false, stop_reading_ = false;
  bool data_waiting_ = false;  // bytes sit unread while reading is paused
  bool close_after_write_ = false, linger_ = false, closed_ = false, shut_ = false, slot_released_ = false;
};

int open_file_limit() {
  struct rlimit limit {};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 1 << 16;
  return int(std::min<rlim_t>(limit.rlim_cur, 1 << 20));
}

bool out_of_descriptors(const beast::error_code& ec) {
  return ec == net::error::no_descriptors || ec.value() == ENFILE || ec == net::error::no_buffer_space ||
         ec == net::error::no_memory;
}

class BeastServer : public HttpServer {
 public:
  BeastServer(const HttpServerOptions& options, HttpService& service)
      : options_(options), service_(service), acceptor_(net::make_strand(ioc_)), backoff_(acceptor_.get_executor()),
        signals_(ioc_, SIGTERM, SIGINT, SIGUSR1) {
    max_connections_ = options_.max_connections > 0 ? options_.max_connections : std::max(16, open_file_limit() - 64);
    max_per_address_ = options_.max_connections_per_address > 0 ? options_.max_connections_per_address
                                                                : std::max(1, max_connections_ / 4);
    caps_ = std::make_shared<ConnectionCaps>(max_connections_, max_per_address_);
  }

  ~BeastServer() override { stop(std::chrono::milliseconds(0)); }

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
  int max_connections() const override { return max_connections_; }
  int max_connections_per_address() const override { return max_per_address_; }
  HttpServerStats stats() const override { return HttpServerStats{caps_->open(), refused_, backoffs_}; }
  void on_shutdown_signal(std::function<void(int)> fn) override { on_signal_ = std::move(fn); }

  void stop(std::chrono::milliseconds grace) override {
    {
      std::lock_guard lock(mutex_);
      if (stopped_) return;
      stopped_ = true;
    }
    // On the acceptor's strand, where connections are admitted: none is
    // admitted after the connections are told to wind down.
    auto wound_down = std::make_shared<std::promise<void>>();
    net::post(acceptor_.get_executor(), [this, wound_down] {
      beast::error_code ignored;
      acceptor_.close(ignored);
      backoff_.cancel();
      signals_.cancel(ignored);
      for_each_connection([](Connection& c) { c.wind_down(); });
      wound_down->set_value();
    });
    const auto deadline = std::chrono::steady_clock::now() + grace;
    if (wound_down->get_future().wait_until(deadline) == std::future_status::ready) wait_for_no_connections(deadline);
    // What is left is cut; the server threads run the closes before they stop.
    for_each_connection([](Connection& c) { c.close(); });
    wait_for_no_connections(std::chrono::steady_clock::now() + std::chrono::seconds(1));
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
      if (out_of_descriptors(ec)) {
        // The pending connection stays in the backlog and the acceptor stays
        // readable: retrying at once would spin a core.
        descriptor_warning_.warn("accept: out of file descriptors or memory; retrying in 100 ms", ++backoffs_);
        backoff_.expires_after(std::chrono::milliseconds(100));
        backoff_.async_wait([this](beast::error_code ec) {
          if (!ec) accept();
        });
        return;
      }
      if (!ec) admit(std::move(socket));
      accept();
    });
  }

  void wait_for_no_connections(std::chrono::steady_clock::time_point deadline) const {
    while (caps_->open() > 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  void for_each_connection(const std::function<void(Connection&)>& fn) {
    std::lock_guard lock(connections_mutex_);
    for (auto& weak : connections_) {
      if (auto c = weak.lock()) fn(*c);
    }
  }

  void admit(tcp::socket socket) {
    beast::error_code ec;
    const auto remote = socket.remote_endpoint(ec);
    if (ec) return;  // gone already
    std::string address = remote.address().to_string();
    if (!caps_->try_acquire(address)) {
      cap_warning_.warn("connection refused: over --max-connections or --max-connections-per-address", ++refused_);
      socket.close(ec);
      return;
    }
    socket.set_option(tcp::no_delay(true), ec);
    socket.non_blocking(true, ec);  // the one synchronous call (check_for_eof's peek) must never wait
    auto connection = std::make_shared<Connection>(std::move(socket), std::move(address), options_, service_, caps_);
    {
      std::lock_guard lock(connections_mutex_);
      // Forget connections that are gone, so the list stays as long as the open
      // ones (a weak_ptr holds its object's memory: make_shared allocated both).
      std::erase_if(connections_, [](const std::weak_ptr<Connection>& w) { return w.expired(); });
      connections_.push_back(connection);
    }
    connection->start();
  }

  HttpServerOptions options_;
  HttpService& service_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  net::steady_timer backoff_;
  net::signal_set signals_;
  std::function<void(int)> on_signal_;
  std::vector<std::thread> threads_;
  uint16_t port_ = 0;
  int max_connections_ = 0, max_per_address_ = 0;
  std::shared_ptr<ConnectionCaps> caps_;
  std::atomic<int64_t> refused_{0}, backoffs_{0};
  RateLimitedWarning cap_warning_, descriptor_warning_;
  std::mutex connections_mutex_;
  std::vector<std::weak_ptr<Connection>> connections_;
  std::mutex mutex_;
  std::condition_variable stopped_cv_;
  bool stopped_ = false;
};

}  // namespace

std::string HttpService::refusal_body(const HttpRequest&, int, const std::string& message) const {
  return error_body(message, "invalid_request_error");
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(const HttpServerOptions& options, HttpService& service) {
  auto server = std::make_unique<BeastServer>(options, service);
  DS_RETURN_IF_ERROR(server->open());
  return std::unique_ptr<HttpServer>(std::move(server));
}

Result<HttpRequest> parse_http_request(const std::string& bytes, const HttpServerOptions& options) {
  http::request_parser<http::string_body> parser;
  apply_limits(parser, options);
  parser.eager(true);
  beast::error_code ec;
  size_t offset = 0;
  while (!parser.is_done() && offset < bytes.size()) {
    const size_t used = parser.put(net::buffer(bytes.data() + offset, bytes.size() - offset), ec);
    if (ec == http::error::need_more) break;
    if (ec) return Status::error("malformed HTTP request: " + ec.message());
    if (used == 0) break;
    offset += used;
  }
  if (!parser.is_done()) {
    parser.put_eof(ec);
    if (ec || !parser.is_done()) return Status::error("incomplete HTTP request");
  }
  HttpRequest request = request_head(parser.get());
  request.body = parser.release().body();
  return request;
}

}  // namespace ds
