// A ModelSpec as JSON text with the canonical keys, which parse_model_spec reads back: how a
// checkpoint carries the model it was written for.
#pragma once

#include <string>

#include "model/spec.h"

namespace cann::model {

std::string spec_to_json(const ModelSpec& s);

}  // namespace cann::model
