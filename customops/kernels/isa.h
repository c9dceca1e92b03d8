// THE table of kernel ISAs: one record per ISA (name, whether this build's architecture has it,
// whether this CPU runs it, what it needs), best first. Every kernel family maps each record to
// its implementation in an IsaRow array (i2s/<family>/dispatch.cc: an I2SKernel per ISA, one
// array per family of i2s/families.h; attention/dispatch.cc: TileOps per ISA), and the library exports the table as text (bitnet_onnx_kernel_names, read by
// bitnet_onnx.customops.library_kernels and tests/cpu_isas.py) and with every family's row in its whole dispatch
// (dispatch_description.h, bitnet_onnx_dispatch).
// BITNET_ONNX_ISA names a record; the default is the first one this build has and the CPU runs.
// Pure C++, no ORT headers.
#pragma once

#include <cstddef>
#include <string>

#include "cpu_features.h"

namespace bitnet_onnx {

// One index per record of kIsaTable, in its order: a family's table is an IsaRow array indexed by
// Isa (of exactly kIsaCount entries, see IsaRow, so a new ISA cannot be missing from a family).
enum Isa : int {
  kIsaAmx, kIsaAvx512Vnni, kIsaAvxVnni, kIsaAvx2,  // x86-64
  kIsaI8mm, kIsaDotprod, kIsaNeon,                // aarch64
  kIsaScalar, kIsaCount
};

struct IsaRecord {
  Isa isa;
  const char* name;  // the BITNET_ONNX_ISA value
  bool built;        // this build's target architecture has the ISA (x86-64 or aarch64 kernels)
  bool (*available)(const CpuFeatures&);  // the CPU and OS run it
  const char* needs;  // what the CPU must provide (for the error naming what it lacks)
};

// kIsaCount records, best first, record i being Isa i.
const IsaRecord* isa_table();

// The ISA to run: the best record this build has and this CPU runs (`forced` null or empty), or
// the one `forced` names. Null with *error set (naming BITNET_ONNX_ISA) when `forced` is unknown,
// not built for this architecture, or not run by this CPU. bitnet_onnx.customops.selected_isa reads its
// answer from the library's dispatch (bench headers); tests/test_dispatch.py checks it against the CPU.
const IsaRecord* select_isa(const char* forced, std::string* error);

// A family's table: for each Isa (in order), the function returning its implementation, or null
// where this build's architecture (or the family) has none. Declared with an open bound,
//   const IsaRow<I2SKernel> kMultiplyKernels[] = {...};
// it fails to compile when bound to a `const IsaRow<Impl> (&)[kIsaCount]` (isa_row, select_isa_row,
// i2s::KernelFamily) with other than kIsaCount rows: a new ISA cannot be missing from a family.
template <typename Impl>
using IsaRow = const Impl* (*)();

// In a family's table: `impl` on the architecture that has it, null on the others.
#if defined(__x86_64__) || defined(_M_X64)
#define BITNET_ONNX_X86(impl) impl
#else
#define BITNET_ONNX_X86(impl) nullptr
#endif
#if defined(__aarch64__)
#define BITNET_ONNX_ARM(impl) impl
#else
#define BITNET_ONNX_ARM(impl) nullptr
#endif

// The family's implementation of `isa` (null where its row is).
template <typename Impl>
const Impl* isa_row(const IsaRow<Impl> (&rows)[kIsaCount], Isa isa) {
  return rows[isa] ? rows[isa]() : nullptr;
}

// The family's implementation of the ISA select_isa picks (same `forced` and errors), or null
// with *error set when the family's row for that ISA is empty.
template <typename Impl>
const Impl* select_isa_row(const IsaRow<Impl> (&rows)[kIsaCount], const char* forced, std::string* error) {
  const IsaRecord* record = select_isa(forced, error);
  if (record == nullptr) return nullptr;
  const Impl* impl = isa_row(rows, record->isa);
  if (impl == nullptr && error)
    *error = std::string("BITNET_ONNX_ISA=") + record->name + ": this build has no kernel of this op for " + record->name;
  return impl;
}

// The table as text, one line per record, best first:
//   name <TAB> built (1/0) <TAB> runs on this CPU (1/0) <TAB> needs
// What bitnet_onnx_kernel_names returns and kernel_test --list-kernels prints.
std::string isa_table_text();

}  // namespace bitnet_onnx
