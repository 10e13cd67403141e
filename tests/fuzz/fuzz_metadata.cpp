// libFuzzer target for the model metadata loader (mlip/metadata.json inside model files).
#include "fuzz_input.h"
#include "mlip/model/model_metadata.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return mlip::fuzz::expect_clear_errors([&] {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception&) {
      return;  // Model::load reports unparsable JSON itself; from_json sees parsed JSON only
    }
    mlip::ModelMetadata::from_json(j, "fuzz.pt");
  });
}
