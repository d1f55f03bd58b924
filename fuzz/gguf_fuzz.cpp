// libFuzzer target: any byte string given to the GGUF reader, and to the
// config and tokenizer loaders that consume its metadata, must produce a
// value or an error, never a crash, a hang or a huge allocation.

#include <cstddef>
#include <cstdint>

#include "gguf/gguf_file.h"
#include "model/model_config.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = ds::GgufFile::parse(data, size);
  if (!file.ok()) return 0;
  (void)ds::ModelConfig::from_gguf(*file.value());
  auto tokenizer = ds::Tokenizer::from_gguf(*file.value());
  if (tokenizer.ok()) (void)tokenizer.value()->encode("Hello, world! 你好", true, true);
  return 0;
}
