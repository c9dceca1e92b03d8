// How the ops report failures to ONNX Runtime: bad inputs as INVALID_ARGUMENT statuses naming the
// op and the node, anything else as a failure status, never an exception across the C API.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "ort_api.h"

namespace bitnet_onnx {

// A bad input or attribute, reported to ORT as INVALID_ARGUMENT.
struct InvalidInput {
  std::string message;
};

inline std::string shape_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Runs `body` (a Compute) and returns what it threw as an ORT status naming `op` and `node`.
template <typename Body>
OrtStatusPtr status_of(const char* op, const std::string& node, Body&& body) {
  auto error = [&](OrtErrorCode code, const std::string& what) {
    return Ort::GetApi().CreateStatus(code, (std::string(op) + " node '" + node + "': " + what).c_str());
  };
  try {
    body();
    return nullptr;
  } catch (const InvalidInput& e) {
    return error(ORT_INVALID_ARGUMENT, e.message);
  } catch (const Ort::Exception& e) {
    return error(e.GetOrtErrorCode(), e.what());
  } catch (const std::bad_alloc&) {
    return error(ORT_FAIL, "out of memory");
  } catch (const std::exception& e) {
    return error(ORT_FAIL, e.what());
  }
}

// A CreateKernelV2: a new State filled by `init` (which reads and checks the node's attributes),
// handed to ORT, or what `init` threw as a status naming `op` and the node (State has `node`).
template <typename State, typename Init>
OrtStatusPtr create_kernel(const OrtApi& api, const char* op, Init&& init, void** kernel) {
  auto state = std::make_unique<State>();
  auto error = [&](OrtErrorCode code, const std::string& what) {
    return api.CreateStatus(code, (std::string(op) + " node '" + state->node + "': " + what).c_str());
  };
  try {
    init(*state);
  } catch (const InvalidInput& e) {
    return error(ORT_INVALID_ARGUMENT, e.message);
  } catch (const std::exception& e) {
    return error(ORT_FAIL, e.what());
  }
  *kernel = state.release();
  return nullptr;
}

}  // namespace bitnet_onnx
