#include "server/multipart_form.h"

#include <gtest/gtest.h>

namespace ds {
namespace {

const std::string k_type = "multipart/form-data; boundary=XyZ";

TEST(MultipartForm, FieldsAndFilesAsClientsSendThem) {
  // As python's httpx writes an upload: a field, then a file with CRLF inside its bytes.
  const std::string body =
      "--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"
      "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in put.jsonl\"\r\nContent-Type: application/octet-stream\r\n\r\n"
      "{\"a\": 1}\r\n{\"b\": 2}\n\r\n--XyZ--\r\n";
  auto parts = parse_multipart_form(k_type, body);
  ASSERT_TRUE(parts.ok()) << parts.message();
  ASSERT_EQ(parts.value().size(), 2u);
  EXPECT_EQ(parts.value()[0].name, "purpose");
  EXPECT_FALSE(parts.value()[0].is_file);
  EXPECT_EQ(parts.value()[0].body, "batch");
  EXPECT_EQ(parts.value()[1].name, "file");
  EXPECT_TRUE(parts.value()[1].is_file);
  EXPECT_EQ(parts.value()[1].filename, "in put.jsonl");
  EXPECT_EQ(parts.value()[1].content_type, "application/octet-stream");
  EXPECT_EQ(parts.value()[1].body, "{\"a\": 1}\r\n{\"b\": 2}\n");
}

TEST(MultipartForm, APreambleAndAQuotedBoundary) {
  const std::string body = "ignored preamble\r\n--a b\r\nContent-Disposition: form-data; name=x\r\n\r\n1\r\n--a b--";
  auto parts = parse_multipart_form("multipart/form-data; boundary=\"a b\"", body);
  ASSERT_TRUE(parts.ok()) << parts.message();
  ASSERT_EQ(parts.value().size(), 1u);
  EXPECT_EQ(parts.value()[0].body, "1");
}

TEST(MultipartForm, MalformedBodiesAreErrors) {
  EXPECT_FALSE(parse_multipart_form("application/json", "{}").ok());
  EXPECT_FALSE(parse_multipart_form("multipart/form-data", "--x\r\n").ok());  // no boundary
  EXPECT_FALSE(parse_multipart_form(k_type, "").ok());
  EXPECT_FALSE(parse_multipart_form(k_type, "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nno end").ok());
  EXPECT_FALSE(parse_multipart_form(k_type, "--XyZ\r\nContent-Disposition: form-data; name=\"a\"").ok());
  EXPECT_FALSE(parse_multipart_form(k_type, "--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--").ok());
  EXPECT_FALSE(parse_multipart_form(k_type, "--XyZ\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nx\r\n--XyZ--").ok());
  EXPECT_FALSE(parse_multipart_form(k_type, "--XyZ garbage").ok());
}

}  // namespace
}  // namespace ds
