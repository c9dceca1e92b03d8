#include "dispatch_description.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attention.h"
#include "driver.h"
#include "isa.h"
#include "measured_choice.h"

namespace bitnet_onnx {
namespace {

// `text` as a JSON string: quotes, backslashes and control bytes escaped (a forced value is the
// caller's environment, any bytes); other bytes pass as they are (the caller's text is UTF-8).
std::string quoted(const char* text) {
  std::string out = "\"";
  for (const char* c = text; *c != '\0'; ++c) {
    const unsigned char byte = static_cast<unsigned char>(*c);
    if (byte == '"' || byte == '\\') {
      out += '\\';
      out += *c;
    } else if (byte < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", byte);
      out += escaped;
    } else {
      out += *c;
    }
  }
  return out + '"';
}

std::string quoted(const std::string& text) { return quoted(text.c_str()); }

std::string name_or_null(const char* name) { return name ? quoted(name) : "null"; }

const char* boolean(bool value) { return value ? "true" : "false"; }

const char* value_of(const char* forced) { return forced ? forced : ""; }

// {"mul": "avx2", "lut": "lut-avx2"}: each family's kernel for `isa`, in the table's order.
std::string family_kernels(Isa isa) {
  std::string out = "{";
  for (i2s::Family f = 0; f < i2s::kFamilyCount; ++f) {
    const i2s::I2SKernel* kernel = i2s::family_kernel(f, isa);
    out += std::string(f ? ", " : "") + quoted(i2s::family_name(f)) + ": " +
           name_or_null(kernel ? kernel->name : nullptr);
  }
  return out + "}";
}

// {"f32": ..., "bf16": ..., "auto": ...}: the attention paths of a record (header: null where none).
std::string attention_paths(const IsaRecord& record, bool runs) {
  const attention::TileOps* floats = attention::tile_ops(record.isa);
  const attention::Bf16TileOps* bf16 = runs ? attention::bf16_tile_ops(record.isa) : nullptr;
  const char* automatic = runs ? attention::precision_name(attention::auto_precision_of(record.isa)) : nullptr;
  // each listed path's head-dim multiple: a head_dim it does not divide runs the next path down
  std::string multiples = "{";
  if (floats) multiples += quoted(floats->name) + ": " + std::to_string(floats->head_dim_multiple);
  if (bf16) multiples += std::string(floats ? ", " : "") + quoted(bf16->name) + ": " + std::to_string(bf16->head_dim_multiple);
  return std::string("{\"f32\": ") + name_or_null(floats ? floats->name : nullptr) +
         ", \"bf16\": " + name_or_null(bf16 ? bf16->name : nullptr) + ", \"auto\": " + name_or_null(automatic) +
         ", \"head_dim_multiple\": " + multiples + "}}";
}

std::string isas() {
  const CpuFeatures& cpu = cpu_features();
  std::string out = "[";
  for (int i = 0; i < kIsaCount; ++i) {
    const IsaRecord& record = isa_table()[i];
    const bool runs = record.built && record.available(cpu);
    out += std::string(i ? ",\n  " : "\n  ") + "{\"name\": " + quoted(record.name) +
           ", \"built\": " + boolean(record.built) + ", \"runs\": " + boolean(runs) + ", \"needs\": " +
           quoted(record.needs) + ",\n   \"kernels\": " + family_kernels(record.isa) +
           ", \"attention\": " + attention_paths(record, runs) + "}";
  }
  return out + "]";
}

std::string rules(const i2s::KernelFamily& family) {
  std::string out = "[";
  for (size_t r = 0; r < family.rule_count; ++r) {
    const i2s::FamilyRule& rule = family.rules[r];
    out += std::string(r ? ", " : "") + "{\"isa\": " + quoted(isa_table()[rule.isa].name) +
           ", \"min_n\": " + std::to_string(rule.min_n) + ", \"block\": " + std::to_string(rule.block) +
           ", \"cost_percent\": " + std::to_string(rule.cost_percent) + "}";
  }
  return out + "]";
}

std::string families() {
  std::string out = "[";
  for (i2s::Family f = 0; f < i2s::kFamilyCount; ++f) {
    const i2s::KernelFamily& family = i2s::family_of(f);
    out += std::string(f ? ",\n  " : "\n  ") + "{\"name\": " + quoted(family.name) + ", \"order\": " +
           std::to_string(f) + ", \"base\": " + boolean(f == i2s::kBaseFamily) + ", \"rules\": " + rules(family) + "}";
  }
  return out + "]";
}

// "M,K,N" -> the shape of one call (M tokens against an [N, K] W) as the op accepts it; false otherwise.
bool parse_shape(const char* text, int64_t* m, int64_t* k, int64_t* n) {
  int64_t* parts[3] = {m, k, n};
  const char* at = text;
  for (int i = 0; i < 3; ++i) {
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(at, &end, 10);
    if (end == at || errno != 0 || *end != (i < 2 ? ',' : '\0')) return false;
    *parts[i] = value;
    at = end + 1;
  }
  return *m >= 1 && *n >= 1 && *k >= i2s::kBlock && *k % i2s::kBlock == 0 && *k <= i2s::kMaxK;
}

// How a node's candidates pick their family ("measured", "rules", "forced": FamilyChoice).
const char* chosen_by(const i2s::Candidates& candidates) {
  switch (candidates.choice) {
    case i2s::FamilyChoice::kMeasured:
      return "measured";
    case i2s::FamilyChoice::kRules:
      return "rules";
    case i2s::FamilyChoice::kForced:
      break;
  }
  return "forced";
}

// {"m", "k", "n", "runs", "by", "error"}: the family the driver runs for one call of `shape` with the
// node's candidates and how it is chosen; "runs" is null when the ISA or the family was refused, and
// while a measured choice has not been made in this process; "null" when no shape was asked for.
std::string shape_choice(const char* shape, Isa isa, const i2s::Candidates* candidates) {
  if (shape == nullptr || shape[0] == '\0') return "null";
  int64_t m = 0, k = 0, n = 0;
  if (!parse_shape(shape, &m, &k, &n))
    return "{\"m\": null, \"k\": null, \"n\": null, \"runs\": null, \"by\": null, \"error\": " +
           quoted("shape " + std::string(shape) + ": expected M,K,N with M, N >= 1 and K a multiple of 128 from " +
                  "128 to " + std::to_string(i2s::kMaxK)) + "}";
  std::string runs = "null", by = "null";
  if (candidates) {
    by = quoted(chosen_by(*candidates));
    const i2s::Family family = candidates->choice == i2s::FamilyChoice::kMeasured
                                   ? i2s::measured_choice().chosen(isa, m, k, n)
                                   : i2s::select_family(*candidates, isa, m, k, n);
    if (family >= 0) runs = quoted(i2s::family_name(family));
  }
  return "{\"m\": " + std::to_string(m) + ", \"k\": " + std::to_string(k) + ", \"n\": " + std::to_string(n) +
         ", \"runs\": " + runs + ", \"by\": " + by + ", \"error\": \"\"}";
}

std::string choice(const char* value, const std::string& picks_json, const char* picks_key, const std::string& error) {
  return std::string("{\"value\": ") + quoted(value) + ", \"" + picks_key + "\": " + picks_json +
         ", \"error\": " + quoted(error) + "}";
}

// What BITNET_ONNX_ISA, BITNET_ONNX_KERNEL and BITNET_ONNX_ATTENTION_PRECISION make the op run, or
// the error it fails with (select_isa, i2s::candidates_for, attention::auto_precision: the op's own rules),
// and the family a call of `shape` runs (select_family).
std::string forced(const char* forced_isa, const char* forced_family, const char* forced_precision, const char* shape) {
  std::string isa_error;
  const IsaRecord* record = select_isa(forced_isa, &isa_error);
  const std::string isa =
      choice(value_of(forced_isa), name_or_null(record ? record->name : nullptr), "picks", isa_error);

  std::string family_error;
  std::string family_picks = "null";
  i2s::Candidates candidates;
  const bool accepted_family =
      record != nullptr && i2s::candidates_for(record->isa, forced_family, &candidates, &family_error);
  if (accepted_family) {
    const bool forced = candidates.choice == i2s::FamilyChoice::kForced;
    family_picks = quoted(forced ? i2s::family_name(candidates.only)
                                 : candidates.choice == i2s::FamilyChoice::kRules ? i2s::kRulesValue
                                                                                   : i2s::kMeasureValue);
  }
  const std::string family = choice(value_of(forced_family), family_picks, "picks", family_error);
  const std::string for_shape =
      shape_choice(shape, record ? record->isa : kIsaScalar, accepted_family ? &candidates : nullptr);

  std::string precision_error;
  attention::Precision precision;
  const bool accepted = attention::auto_precision(forced_isa, forced_precision, &precision, &precision_error);
  const std::string automatic = accepted ? quoted(attention::precision_name(precision)) : "null";
  const std::string attention_precision = choice(value_of(forced_precision), automatic, "auto", precision_error);

  return "{\"isa\": " + isa + ",\n  \"family\": " + family + ",\n  \"shape\": " + for_shape +
         ",\n  \"attention_precision\": " + attention_precision + "}";
}

}  // namespace

std::string dispatch_description(const char* forced_isa, const char* forced_family, const char* forced_precision,
                                 const char* shape) {
  return "{\"isas\": " + isas() + ",\n \"families\": " + families() + ",\n \"default_isa\": " +
         quoted(select_isa(nullptr, nullptr)->name) + ",\n \"forced\": " +
         forced(forced_isa, forced_family, forced_precision, shape) + ",\n \"trials_per_family\": " +
         std::to_string(i2s::kTrialsPerFamily) + ",\n \"measured\": " + i2s::measured_choice().json() + "}\n";
}

}  // namespace bitnet_onnx
