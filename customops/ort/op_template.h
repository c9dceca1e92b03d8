// The ORT scaffolding every op of the domain shares, written once: an op states its name, its
// typed inputs and outputs and its kernel class; OpDefinition<Kernel> makes the OrtCustomOp of it
// (CustomOpBase with status-returning CreateKernelV2 / ComputeV2, the CPU execution provider and
// the domain versions of domain.h) and OpKernel<Kernel> the kernel's ComputeV2.
//
//   struct MyKernel : OpKernel<MyKernel> {
//     static constexpr const char* kName = "MyOp";                        // the node's op_type
//     static constexpr Port kInputs[] = {{"X", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT}};
//     static constexpr Port kOutputs[] = {{"Y", ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT}};
//     void init(const OrtKernelInfo* info);           // reads and checks attributes; throws InvalidInput
//     void compute(Ort::KernelContext& ctx) const;    // one run; throws InvalidInput on bad input
//   };
//   OrtCustomOp* my_op() { return op_definition<MyKernel>(); }
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>

#include "domain.h"
#include "op_errors.h"
#include "ort_api.h"

namespace bitnet_onnx {

// One input or output of an op: its name (for the reader), element type (UNDEFINED: several,
// checked at run time) and whether a node may omit it.
struct Port {
  const char* name;
  ONNXTensorElementDataType type;
  bool optional = false;
};

// The kernel side: `node` (the node's name, for error messages) and ComputeV2, which runs
// Kernel::compute and returns what it threw as a status naming the op and the node.
template <typename Kernel>
struct OpKernel {
  std::string node;

  OrtStatusPtr ComputeV2(OrtKernelContext* context) const {
    return status_of(Kernel::kName, node, [&] {
      Ort::KernelContext ctx(context);
      static_cast<const Kernel*>(this)->compute(ctx);
    });
  }
};

// The op definition ORT registers: everything read from Kernel's name and ports.
template <typename Kernel>
struct OpDefinition : Ort::CustomOpBase<OpDefinition<Kernel>, Kernel, /*WithStatus=*/true> {
  OpDefinition() {
    // The versions the op implements. ORT picks the kernel by its one schema's since version
    // (this start), whatever version the graph imports: hosts check the import (docs/op.md).
    this->start_ver_ = kDomainVersionFirst;
    this->end_ver_ = kDomainVersionLast;
  }

  OrtStatusPtr CreateKernelV2(const OrtApi& api, const OrtKernelInfo* info, void** kernel) const {
    return create_kernel<Kernel>(
        api, Kernel::kName,
        [info](Kernel& state) {
          state.node = Ort::ConstKernelInfo(info).GetNodeName();
          state.init(info);
        },
        kernel);
  }

  const char* GetName() const { return Kernel::kName; }
  const char* GetExecutionProviderType() const { return "CPUExecutionProvider"; }

  size_t GetInputTypeCount() const { return std::size(Kernel::kInputs); }
  ONNXTensorElementDataType GetInputType(size_t i) const { return Kernel::kInputs[i].type; }
  OrtCustomOpInputOutputCharacteristic GetInputCharacteristic(size_t i) const {
    return Kernel::kInputs[i].optional ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  }
  size_t GetOutputTypeCount() const { return std::size(Kernel::kOutputs); }
  ONNXTensorElementDataType GetOutputType(size_t i) const { return Kernel::kOutputs[i].type; }
  OrtCustomOpInputOutputCharacteristic GetOutputCharacteristic(size_t i) const {
    return Kernel::kOutputs[i].optional ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
  }
};

// Reads an int (float) attribute into *value; false (value untouched) when the node does not set
// it as that type.
inline bool int_attribute(const OrtKernelInfo* info, const char* name, int64_t* value) {
  if (OrtStatus* st = Ort::GetApi().KernelInfoGetAttribute_int64(info, name, value)) {
    Ort::GetApi().ReleaseStatus(st);
    return false;
  }
  return true;
}
inline bool float_attribute(const OrtKernelInfo* info, const char* name, float* value) {
  if (OrtStatus* st = Ort::GetApi().KernelInfoGetAttribute_float(info, name, value)) {
    Ort::GetApi().ReleaseStatus(st);
    return false;
  }
  return true;
}

// The op definition of Kernel, in static storage (ORT keeps the raw pointer for the process lifetime).
template <typename Kernel>
OrtCustomOp* op_definition() {
  static OpDefinition<Kernel> op;
  return &op;
}

}  // namespace bitnet_onnx
