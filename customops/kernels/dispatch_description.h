// The library's whole dispatch as one JSON text, built from the tables themselves (the ISA table of
// isa.h, the family table of i2s/families.h with each family's IsaRow array and rules, the attention
// paths of attention/dispatch.cc): what bitnet_onnx_dispatch exports, what
// bitnet_onnx.customops.dispatch() parses and every Python map of ISAs or families is derived from
// (docs/op.md, "The library's dispatch"). Pure C++, no ORT headers.
#pragma once

#include <string>

namespace bitnet_onnx {

// The values of BITNET_ONNX_ISA, BITNET_ONNX_KERNEL and BITNET_ONNX_ATTENTION_PRECISION to answer
// for (null or empty: unset), and `shape`, one call's "M,K,N" (M tokens against an [N, K] W; null or
// empty: none). The text is one JSON object:
//   "isas": one object per record of the ISA table, best first: "name", "built", "runs" (this CPU),
//     "needs", "kernels" (family name -> its kernel's name for this ISA, null where it has none),
//     "attention": {"f32": the float tiles' name (null where not built), "bf16": the bf16
//     dot-product tiles' name on this CPU (null: bf16 runs the float tiles on rounded operands, or
//     the CPU does not run the ISA), "auto": what precision "auto" runs, unforced (null where the
//     CPU does not run the ISA), "head_dim_multiple": {path name: the head_dim multiple it needs} for the
//     paths listed}.
//   "families": one object per row of families.h, in the driver's order: "name", "order", "base",
//     "rules" (the FamilyRule rows: "isa", "min_n", "block", "cost_percent"; empty: forced only).
//   "default_isa": the record select_isa picks with nothing forced.
//   "forced": {"isa": {"value", "picks" (name or null), "error"}, "family": {"value", "picks"
//     ("measure" when unset, "rules", or the forced family's name; null when refused or the ISA is),
//     "error"}, "shape": null without a shape, else {"m", "k", "n", "runs" (the family the driver runs for
//     that call: the forced one, the rules' (select_family), or the one measured in this process; null
//     while unmeasured, or when the ISA or family is refused or the shape is not one the op takes),
//     "by" ("measured", "rules" or "forced"; null when refused), "error"}, "attention_precision":
//     {"value", "auto" (what precision "auto" runs; null when refused), "error"}}; each error the
//     one line the op would fail with, "" when accepted.
//   "trials_per_family": the timed calls of each family before a measured choice is made.
//   "measured": the family choices this process has measured or is measuring (MeasuredChoice::json,
//     i2s/measured_choice.h): what the op's nodes in this process run per shape, and why.
std::string dispatch_description(const char* forced_isa, const char* forced_family, const char* forced_precision,
                                 const char* shape);

}  // namespace bitnet_onnx
