/* Checks which version of the bitnet_onnx domain a model file imports, before a host creates its session.
 *
 * Why a host must: ONNX Runtime runs a graph importing any version of a custom domain (1 to 1000) with
 * the op library's one kernel per op, whatever versions the ops declare (docs/op.md, "Version"), so a
 * graph written for a later version of the ops would run with the wrong ones. bitnet_onnx.runtime
 * checks the import in Python; embed.c and embed.cpp call model_check_domain_version below.
 *
 * The reader reads only the top-level fields of the ModelProto (onnx.proto): opset_import is field 8,
 * a repeated OperatorSetIdProto whose domain is field 1 (string) and version field 2 (int64). Every
 * other field, the graph (field 7) above all, is skipped by its length without being read, so a model
 * of any size costs a few small reads and no memory beyond a fixed buffer. Every length is checked
 * against the file's size before it is used: a truncated or non-protobuf file is an error, never a
 * read past the end. The path must be a regular file (a FIFO would block the open, and ORT's own).
 *
 * One header for both programs (C11 and C++17), POSIX open/pread/fstat: a C program includes it
 * after defining _POSIX_C_SOURCE 200809L (O_CLOEXEC, pread). */
#ifndef BITNET_ONNX_EXAMPLES_MODEL_OPSET_H
#define BITNET_ONNX_EXAMPLES_MODEL_OPSET_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* The op library's domain and the versions of it its ops implement. The library does not export
 * them (its symbols: RegisterCustomOps, bitnet_onnx_op_names, bitnet_onnx_kernel_names,
 * bitnet_onnx_attention_auto_precision), so they are
 * copied from customops/ort/domain.h (kDomain, kDomainVersionFirst, kDomainVersionLast);
 * tests/test_examples.py checks that they agree. */
#define BITNET_ONNX_DOMAIN "bitnet_onnx"
#define BITNET_ONNX_DOMAIN_VERSION_FIRST 1
#define BITNET_ONNX_DOMAIN_VERSION_LAST 1

/* ModelProto and OperatorSetIdProto field numbers (onnx.proto) and the protobuf wire types. */
enum { ONNX_MODEL_OPSET_IMPORT = 8, ONNX_OPSET_DOMAIN = 1, ONNX_OPSET_VERSION = 2 };
enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LENGTH = 2, WIRE_FIXED32 = 5 };

/* A file read forward through a fixed window; `end` (never past the file's size) bounds every read
 * and skip: the file's end at the top level, an opset_import's end inside one. */
typedef struct {
  const char* path;
  int fd;
  uint64_t size, pos, end;            /* the file's size; the next byte to read; the end of what is read */
  unsigned char window[4096];
  uint64_t window_start, window_len;  /* window holds bytes [window_start, window_start + window_len) */
  char* error;                        /* the one-line message of the first failure */
  size_t error_size;
} ModelReader;

static inline int model_reader_fail(ModelReader* r, const char* what) {
  snprintf(r->error, r->error_size, "%s: not a valid ONNX model (%s at byte %" PRIu64 " of %" PRIu64 ")", r->path,
           what, r->pos, r->size);
  return -1;
}

/* What a field running past the end of what holds it means: in the file, a truncation (or not ONNX). */
static inline const char* model_truncation(const ModelReader* r) {
  return r->end == r->size ? "truncated protobuf: a field runs past the end of the file"
                           : "malformed protobuf: a field runs past the end of its opset_import";
}

static inline int model_read_byte(ModelReader* r, unsigned char* byte) {
  if (r->pos >= r->end) return model_reader_fail(r, model_truncation(r));
  if (r->pos < r->window_start || r->pos >= r->window_start + r->window_len) {
    ssize_t got;
    do got = pread(r->fd, r->window, sizeof r->window, (off_t)r->pos);
    while (got < 0 && errno == EINTR);
    if (got <= 0) {
      snprintf(r->error, r->error_size, "%s: read error at byte %" PRIu64 " (%s)", r->path, r->pos,
               got < 0 ? strerror(errno) : "the file shrank while being read");
      return -1;
    }
    r->window_start = r->pos;
    r->window_len = (uint64_t)got;
  }
  *byte = r->window[r->pos - r->window_start];
  r->pos++;
  return 0;
}

/* A base-128 varint: at most 10 bytes; bits beyond 64 are dropped, as protobuf's parsers do. */
static inline int model_read_varint(ModelReader* r, uint64_t* value) {
  *value = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    unsigned char byte;
    if (model_read_byte(r, &byte) != 0) return -1;
    *value |= (uint64_t)(byte & 0x7f) << shift; /* shift 63: only the byte's lowest bit stays */
    if ((byte & 0x80) == 0) return 0;
  }
  return model_reader_fail(r, "varint longer than 10 bytes");
}

/* Moves past `count` bytes, which must lie inside the message being read (pos <= end always holds). */
static inline int model_skip(ModelReader* r, uint64_t count) {
  if (count > r->end - r->pos) return model_reader_fail(r, model_truncation(r));
  r->pos += count;
  return 0;
}

/* Reads a field's tag: its number and wire type. ONNX writes no groups (wire types 3 and 4). */
static inline int model_read_tag(ModelReader* r, uint64_t* field, unsigned* wire) {
  uint64_t tag;
  if (model_read_varint(r, &tag) != 0) return -1;
  *field = tag >> 3;
  *wire = (unsigned)(tag & 7);
  if (*field == 0 || *field > 536870911u) return model_reader_fail(r, "protobuf field number out of range");
  if (*wire != WIRE_VARINT && *wire != WIRE_FIXED64 && *wire != WIRE_LENGTH && *wire != WIRE_FIXED32)
    return model_reader_fail(r, "protobuf wire type that ONNX does not use");
  return 0;
}

/* Skips the value of a field of wire type `wire`. */
static inline int model_skip_value(ModelReader* r, unsigned wire) {
  uint64_t length;
  switch (wire) {
    case WIRE_VARINT: return model_read_varint(r, &length);
    case WIRE_FIXED64: return model_skip(r, 8);
    case WIRE_FIXED32: return model_skip(r, 4);
    default:
      if (model_read_varint(r, &length) != 0) return -1;
      return model_skip(r, length);
  }
}

/* One OperatorSetIdProto of `length` bytes: whether its domain is `domain`, and its version (protobuf
 * rules: an absent field is "" / 0, a repeated one counts its last value, a field of an unexpected
 * wire type is an unknown field). The domain is compared byte by byte as it is read, so a long one
 * costs no memory. */
static inline int model_read_opset(ModelReader* r, uint64_t length, const char* domain, int* is_domain,
                                   int64_t* version) {
  if (length > r->end - r->pos) return model_skip(r, length); /* reports the truncation */
  const uint64_t outer_end = r->end;
  const size_t domain_len = strlen(domain);
  r->end = r->pos + length;
  *is_domain = domain_len == 0;
  *version = 0;
  while (r->pos < r->end) {
    uint64_t field, value;
    unsigned wire;
    if (model_read_tag(r, &field, &wire) != 0) return -1;
    if (field == ONNX_OPSET_DOMAIN && wire == WIRE_LENGTH) {
      if (model_read_varint(r, &value) != 0) return -1;
      if (value > r->end - r->pos) return model_skip(r, value); /* reports the truncation */
      *is_domain = value == domain_len;
      for (uint64_t k = 0; k < value; k++) {
        unsigned char byte;
        if (model_read_byte(r, &byte) != 0) return -1;
        if (*is_domain && byte != (unsigned char)domain[k]) *is_domain = 0;
      }
    } else if (field == ONNX_OPSET_VERSION && wire == WIRE_VARINT) {
      if (model_read_varint(r, &value) != 0) return -1;
      *version = (int64_t)value; /* two's complement, as protobuf encodes a negative int64 */
    } else if (model_skip_value(r, wire) != 0) {
      return -1;
    }
  }
  r->end = outer_end;
  return 0;
}

/* "versions 1 to 3" or "version 1". */
static inline void model_describe_versions(char* out, size_t size, int64_t first, int64_t last) {
  if (first == last) snprintf(out, size, "version %" PRId64, first);
  else snprintf(out, size, "versions %" PRId64 " to %" PRId64, first, last);
}

/* 0 when every opset_import of `domain` in the model at `path` is a version in [first, last] (or
 * there is none); -1 with a one-line message in `error` (naming the file) otherwise, or when the
 * file is not a regular file, cannot be read or is not a well-formed protobuf. */
static inline int model_check_domain_version(const char* path, const char* domain, int64_t first, int64_t last,
                                             char* error, size_t error_size) {
  ModelReader r;
  memset(&r, 0, sizeof r);
  r.path = path;
  r.error = error;
  r.error_size = error_size;
  /* O_NONBLOCK: opening a FIFO without a writer returns at once, and fstat then refuses it. */
  r.fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (r.fd < 0) {
    snprintf(error, error_size, "%s: cannot open the model (%s)", path, strerror(errno));
    return -1;
  }
  struct stat st;
  int status = -1;
  if (fstat(r.fd, &st) != 0) {
    snprintf(error, error_size, "%s: cannot stat the model (%s)", path, strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    snprintf(error, error_size, "%s: the model is not a regular file (%s)", path,
             S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
  } else {
    r.size = r.end = (uint64_t)st.st_size;
    /* The whole file is scanned before a refused version is reported: a malformed file is reported
     * as such, as ORT would, whatever it imports. */
    int refused = 0;
    int64_t refused_version = 0;
    status = 0;
    while (status == 0 && r.pos < r.end) {
      uint64_t field, length;
      unsigned wire;
      int is_domain;
      int64_t version;
      if (model_read_tag(&r, &field, &wire) != 0) status = -1;
      else if (field != ONNX_MODEL_OPSET_IMPORT || wire != WIRE_LENGTH) status = model_skip_value(&r, wire);
      else if (model_read_varint(&r, &length) != 0) status = -1;
      else if (model_read_opset(&r, length, domain, &is_domain, &version) != 0) status = -1;
      else if (is_domain && !refused && (version < first || version > last)) {
        refused = 1;
        refused_version = version;
      }
    }
    if (status == 0 && refused) {
      char implemented[64];
      model_describe_versions(implemented, sizeof implemented, first, last);
      snprintf(error, error_size, "%s: imports domain '%s' version %" PRId64 "; this op library implements %s%s",
               path, domain, refused_version, implemented,
               refused_version > last ? " (a newer bitnet-onnx wrote it?)" : "");
      status = -1;
    }
  }
  close(r.fd);
  return status;
}

#endif
