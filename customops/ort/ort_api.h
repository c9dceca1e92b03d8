// The ONNX Runtime C++ API as this library uses it: initialized by RegisterCustomOps from the
// OrtApiBase the host passes in (ORT_API_MANUAL_INIT), so the library never links libonnxruntime.
#pragma once

#define ORT_API_MANUAL_INIT
#include "onnxruntime_cxx_api.h"
#undef ORT_API_MANUAL_INIT
