#include <gtest/gtest.h>

#include "server/http_server.h"

namespace ds {
namespace {

TEST(HttpRequestParse, HeadersBodyAndTheRequestId) {
  HttpServerOptions options;
  auto r = parse_http_request("POST /v1/completions?x=1 HTTP/1.1\r\nHost: h\r\nX-Request-Id: job-7\r\nAUTHORIZATION: Bearer k\r\n"
                              "Content-Length: 2\r\n\r\n{}",
                              options);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r.value().method, "POST");
  EXPECT_EQ(r.value().path(), "/v1/completions");
  EXPECT_EQ(r.value().header("authorization"), "Bearer k");  // names in lower case
  EXPECT_EQ(r.value().body, "{}");
  EXPECT_EQ(r.value().request_id, "job-7");
}

TEST(HttpRequestParse, AnUnusableRequestIdIsReplaced) {
  HttpServerOptions options;
  for (const std::string& id : {std::string("has space"), std::string(129, 'a'), std::string("")}) {
    auto r = parse_http_request("GET /health HTTP/1.1\r\nHost: h\r\nX-Request-Id: " + id + "\r\n\r\n", options);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r.value().request_id.size(), 16u) << id;
    EXPECT_NE(r.value().request_id, id);
  }
  auto a = parse_http_request("GET / HTTP/1.1\r\nHost: h\r\n\r\n", options);
  auto b = parse_http_request("GET / HTTP/1.1\r\nHost: h\r\n\r\n", options);
  EXPECT_NE(a.value().request_id, b.value().request_id);
}

TEST(HttpRequestParse, LimitsAndMalformedInputAreErrors) {
  HttpServerOptions options;
  options.max_body_bytes = 10;
  options.max_header_bytes = 256;
  EXPECT_FALSE(parse_http_request("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n01234567890", options).ok());
  EXPECT_FALSE(parse_http_request("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nb\r\n01234567890\r\n0\r\n\r\n", options).ok());
  EXPECT_FALSE(parse_http_request("GET / HTTP/1.1\r\nX: " + std::string(300, 'x') + "\r\n\r\n", options).ok());
  EXPECT_FALSE(parse_http_request("NOT HTTP\r\n\r\n", options).ok());
  EXPECT_FALSE(parse_http_request("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab", options).ok());  // cut short
  EXPECT_TRUE(parse_http_request("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", options).ok());
}

}  // namespace
}  // namespace ds
