#pragma once
// An id a client is handed for something stored ("resp_", "file-", "batch_"
// and 32 random hex digits): unguessable, so one id names one object for good.

#include <cstdio>
#include <random>
#include <string>

namespace ds {

inline std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 random{std::random_device{}()};
  char id[64];
  std::snprintf(id, sizeof id, "%s%016llx%016llx", prefix, (unsigned long long)random(), (unsigned long long)random());
  return id;
}

}  // namespace ds
