#pragma once
// The OpenAPI 3 description of every endpoint and field the server accepts,
// served at /openapi.json (schemathesis checks the server against it).

#include <string>

namespace ds {

const std::string& openapi_spec();

}  // namespace ds
