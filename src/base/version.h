#pragma once
// The version dsinfer reports (GET /version, the OpenAPI document).

namespace ds {

constexpr const char* k_dsinfer_version = "0.2.0";

}  // namespace ds
