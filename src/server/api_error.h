#pragma once
// An error as the OpenAI API reports it: an HTTP status and a JSON body
// {"error": {"message", "type", "param", "code"}}.

#include <string>

namespace ds {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, when there is one
  std::string code;
  int retry_after_seconds = 0;  // sent as Retry-After for 429 and 503

  static ApiError invalid(const std::string& param, const std::string& message) {
    return ApiError{400, message, "invalid_request_error", param, "", 0};
  }
  std::string json() const;
};

}  // namespace ds
