/* The record codec: tf.train.Example records <-> arrays, TFRecord framing.
 *
 * The local path of `packed_bert_tf.data.records.record_codec` (TensorFlow is the
 * fallback where this was not built). Decoding is what
 * `tf.io.parse_example` does with fixed-length int64 and float features, for
 * a process that should not import TensorFlow (seconds of CPU) and at several
 * times its speed. One call frames up to `max_records` records of a TFRecord
 * byte string, checks both masked CRC-32C of each (as TensorFlow's reader
 * does), parses the Example wire format and writes each wanted feature into
 * row r of its C-contiguous [max_records, length] output (int64, int32 or
 * float32). The wire format, as protobuf encodes it:
 *
 *   Example   { Features features = 1; }
 *   Features  { map<string, Feature> feature = 1; }   entries: key = 1, value = 2
 *   Feature   { oneof { BytesList = 1; FloatList = 2; Int64List = 3; } }
 *   FloatList { repeated float value = 1; }  Int64List { repeated int64 value = 1; }
 *
 * Lists may be packed (one length-delimited run) or not (a field per value),
 * fields come in any order, unknown fields are skipped, and a key given twice
 * keeps its last value, as protobuf's parser does. Features not asked for are
 * skipped by their framing, not validated; groups (wire types 3, 4, which no
 * Example holds) and a map entry's value given twice (protobuf would merge
 * the two) are refused as not an Example. Nothing is written beyond
 * the outputs' rows; a bad record stops the call and is reported (kind,
 * record, feature, count) for the caller to name; the rows before it are
 * complete. The GIL is released while decoding. Cost: one pass over the
 * bytes, O(record bytes), plus the CRC (SSE 4.2's crc32 instruction where
 * the CPU has it, else slicing-by-8 tables).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

enum {
    OK = 0,
    ERR_TRUNCATED,        /* the file ends inside a record */
    ERR_LENGTH_CHECKSUM,  /* the record's length fails its CRC */
    ERR_DATA_CHECKSUM,    /* the record's bytes fail their CRC */
    ERR_NOT_EXAMPLE,      /* not a valid Example message */
    ERR_MISSING,          /* a wanted feature is absent */
    ERR_WRONG_TYPE,       /* a wanted feature holds another kind of list */
    ERR_WRONG_COUNT,      /* a wanted feature has another number of values */
    ERR_OUT_OF_RANGE,     /* a value does not fit an int32 output */
};
static const char *const ERROR_NAMES[] = {
    "ok", "truncated", "length_checksum", "data_checksum", "not_example",
    "missing", "wrong_type", "wrong_count", "out_of_range",
};

/* ---------------------------------------------------------------- CRC-32C */
static uint32_t crc_tables[8][256];

static void init_crc_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t crc = i;
        for (int bit = 0; bit < 8; bit++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
        crc_tables[0][i] = crc;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int table = 1; table < 8; table++)
            crc_tables[table][i] = crc_tables[0][crc_tables[table - 1][i] & 0xFF] ^
                                   (crc_tables[table - 1][i] >> 8);
}

static uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t load_le64(const uint8_t *p) {
    return (uint64_t)load_le32(p) | (uint64_t)load_le32(p + 4) << 32;
}

/* Slicing-by-8 (Kounavis and Berry, 2008): eight table lookups per 8 bytes. */
static uint32_t crc32c_tables(const uint8_t *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t low = crc ^ load_le32(p);
        crc = crc_tables[7][low & 0xFF] ^ crc_tables[6][(low >> 8) & 0xFF] ^
              crc_tables[5][(low >> 16) & 0xFF] ^ crc_tables[4][low >> 24] ^
              crc_tables[3][p[4]] ^ crc_tables[2][p[5]] ^ crc_tables[1][p[6]] ^
              crc_tables[0][p[7]];
    }
    for (; n; p++, n--)
        crc = crc_tables[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_CRC32_INSTRUCTION 1
__attribute__((target("sse4.2")))
static uint32_t crc32c_instruction(const uint8_t *p, size_t n) {
    uint64_t crc = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8)
        crc = __builtin_ia32_crc32di(crc, load_le64(p));
    uint32_t crc32 = (uint32_t)crc;
    for (; n; p++, n--)
        crc32 = __builtin_ia32_crc32qi(crc32, *p);
    return ~crc32;
}
#endif

static uint32_t (*crc32c)(const uint8_t *, size_t) = crc32c_tables;

/* TFRecord's masked CRC: rotated right by 15 bits, plus a constant. */
static uint32_t masked_crc32c(const uint8_t *p, size_t n) {
    uint32_t crc = crc32c(p, n);
    return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

/* ----------------------------------------------------------- wire format */
/* A varint at *p, at most 10 bytes; 0 when it is cut off or too long. */
static inline int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *value) {
    const uint8_t *q = *p;
    if (q < end && *q < 0x80) {  /* one byte: most values of these records */
        *value = *q;
        *p = q + 1;
        return 1;
    }
    uint64_t result = 0;
    for (int shift = 0; shift < 64 && q < end; shift += 7) {
        uint8_t byte = *q++;
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *value = result;
            *p = q;
            return 1;
        }
    }
    return 0;
}

/* A field's tag: a varint below 2^32 with a field number of at least 1, as
 * protobuf requires; 0 otherwise. */
static inline int read_tag(const uint8_t **p, const uint8_t *end, uint64_t *tag) {
    return read_varint(p, end, tag) && *tag <= 0xFFFFFFFFu && *tag >> 3 != 0;
}

/* A length-delimited field's bytes [*start, *start + *length); 0 if cut off. */
static inline int read_bytes(const uint8_t **p, const uint8_t *end,
                             const uint8_t **start, size_t *length) {
    uint64_t size;
    if (!read_varint(p, end, &size) || size > (uint64_t)(end - *p))
        return 0;
    *start = *p;
    *length = (size_t)size;
    *p += size;
    return 1;
}

/* Skips a field of the given wire type; 0 on a malformed or group field. */
static int skip_field(const uint8_t **p, const uint8_t *end, unsigned wire_type) {
    uint64_t ignored;
    const uint8_t *start;
    size_t length;
    switch (wire_type) {
    case 0:
        return read_varint(p, end, &ignored);
    case 1:
        if (end - *p < 8) return 0;
        *p += 8;
        return 1;
    case 2:
        return read_bytes(p, end, &start, &length);
    case 5:
        if (end - *p < 4) return 0;
        *p += 4;
        return 1;
    default:  /* groups (3, 4) never occur in an Example; 6, 7 are invalid */
        return 0;
    }
}

/* ------------------------------------------------------------- features */
enum { KIND_INT64, KIND_INT32, KIND_FLOAT32 };

typedef struct {
    const char *name;
    Py_ssize_t name_length;
    Py_ssize_t length;  /* values per record */
    int kind;
    char *output;       /* [max_records, length] */
    Py_buffer view;
    /* The record being decoded: the Feature message's bytes, if present. */
    const uint8_t *feature;
    size_t feature_length;
    int present;
} Wanted;

typedef struct {
    int error;
    Py_ssize_t feature;  /* index into the wanted features, or -1 */
    Py_ssize_t count;    /* values found (ERR_WRONG_COUNT) */
} Failure;

/* One map entry (key = 1, value = 2): marks the wanted feature it names. */
static int parse_entry(const uint8_t *p, const uint8_t *end, Wanted *wanted,
                       Py_ssize_t num_wanted) {
    const uint8_t *key = (const uint8_t *)"", *value = NULL;
    size_t key_length = 0, value_length = 0;
    while (p < end) {
        uint64_t tag;
        if (!read_tag(&p, end, &tag)) return 0;
        if (tag == (1 << 3 | 2)) {
            if (!read_bytes(&p, end, &key, &key_length)) return 0;
        } else if (tag == (2 << 3 | 2)) {
            if (!read_bytes(&p, end, &value, &value_length)) return 0;
        } else if (!skip_field(&p, end, tag & 7)) {
            return 0;
        }
    }
    for (Py_ssize_t i = 0; i < num_wanted; i++) {
        if ((size_t)wanted[i].name_length == key_length &&
            memcmp(wanted[i].name, key, key_length) == 0) {
            wanted[i].present = 1;  /* the last entry of a key wins */
            wanted[i].feature = value;  /* NULL: an empty Feature */
            wanted[i].feature_length = value_length;
            break;
        }
    }
    return 1;
}

/* Example -> Features -> entries; 0 if the bytes are not an Example. */
static int find_features(const uint8_t *p, const uint8_t *end, Wanted *wanted,
                         Py_ssize_t num_wanted) {
    while (p < end) {
        uint64_t tag;
        if (!read_tag(&p, end, &tag)) return 0;
        if (tag != (1 << 3 | 2)) {  /* not Example.features */
            if (!skip_field(&p, end, tag & 7)) return 0;
            continue;
        }
        const uint8_t *features;
        size_t features_length;
        if (!read_bytes(&p, end, &features, &features_length)) return 0;
        const uint8_t *q = features, *features_end = features + features_length;
        while (q < features_end) {
            if (!read_tag(&q, features_end, &tag)) return 0;
            if (tag == (1 << 3 | 2)) {  /* Features.feature, a map entry */
                const uint8_t *entry;
                size_t entry_length;
                if (!read_bytes(&q, features_end, &entry, &entry_length) ||
                    !parse_entry(entry, entry + entry_length, wanted, num_wanted))
                    return 0;
            } else if (!skip_field(&q, features_end, tag & 7)) {
                return 0;
            }
        }
    }
    return 1;
}

/* The varints in [p, end) into out[*count], out[*count + 1], ... up to
 * `capacity`; *count counts all of them, even those past it. */
#define DEFINE_DECODE_VARINTS(NAME, TYPE, CHECK_RANGE)                          \
static int NAME(const uint8_t *p, const uint8_t *end, TYPE *out,               \
                Py_ssize_t capacity, Py_ssize_t *count) {                      \
    Py_ssize_t n = *count;                                                      \
    while (p < end) {                                                           \
        /* Eight one-byte varints at once: masks, segment ids, padding. */      \
        if (end - p >= 8 && capacity - n >= 8 &&                                \
            !(load_le64(p) & 0x8080808080808080ull)) {                          \
            for (int k = 0; k < 8; k++) out[n + k] = p[k];                      \
            p += 8;                                                             \
            n += 8;                                                             \
            continue;                                                           \
        }                                                                       \
        uint64_t value;                                                         \
        if (!read_varint(&p, end, &value)) return ERR_NOT_EXAMPLE;              \
        CHECK_RANGE                                                             \
        if (n < capacity) out[n] = (TYPE)(int64_t)value;                        \
        n++;                                                                    \
    }                                                                           \
    *count = n;                                                                 \
    return OK;                                                                  \
}
DEFINE_DECODE_VARINTS(decode_varints_int64, int64_t, )
DEFINE_DECODE_VARINTS(decode_varints_int32, int32_t,
    if ((int64_t)value < INT32_MIN || (int64_t)value > INT32_MAX)
        return ERR_OUT_OF_RANGE;)

/* The values of one Int64List/FloatList message into `row`. Returns an error
 * code; *count is the number of values seen (all of them, even past `length`). */
static int decode_list(const uint8_t *p, const uint8_t *end, const Wanted *w,
                       char *row, Py_ssize_t *count) {
    const int is_float = w->kind == KIND_FLOAT32;
    while (p < end) {
        uint64_t tag;
        if (!read_tag(&p, end, &tag)) return ERR_NOT_EXAMPLE;
        const uint8_t *values, *values_end;
        if (tag == (1 << 3 | 2)) {  /* packed */
            size_t length;
            if (!read_bytes(&p, end, &values, &length)) return ERR_NOT_EXAMPLE;
            values_end = values + length;
            if (is_float && length % 4) return ERR_NOT_EXAMPLE;
        } else if (tag == (1 << 3 | (is_float ? 5 : 0))) {  /* one value, unpacked */
            values = p;
            if (is_float) {
                if (end - p < 4) return ERR_NOT_EXAMPLE;
                p += 4;
            } else {
                uint64_t ignored;
                if (!read_varint(&p, end, &ignored)) return ERR_NOT_EXAMPLE;
            }
            values_end = p;
        } else {
            if (!skip_field(&p, end, tag & 7)) return ERR_NOT_EXAMPLE;
            continue;
        }
        int error = OK;
        if (is_float) {
            for (; values < values_end; values += 4, ++*count) {
                if (*count < w->length) {
                    uint32_t bits = load_le32(values);
                    memcpy(row + *count * 4, &bits, 4);
                }
            }
        } else if (w->kind == KIND_INT64) {
            error = decode_varints_int64(values, values_end, (int64_t *)row, w->length,
                                         count);
        } else {
            error = decode_varints_int32(values, values_end, (int32_t *)row, w->length,
                                         count);
        }
        if (error != OK) return error;
    }
    return OK;
}

/* The wanted features of one Example into row `record` of the outputs. */
static void decode_example(const uint8_t *p, size_t n, Wanted *wanted,
                           Py_ssize_t num_wanted, Py_ssize_t record, Failure *failure) {
    for (Py_ssize_t i = 0; i < num_wanted; i++) wanted[i].present = 0;
    if (!find_features(p, p + n, wanted, num_wanted)) {
        failure->error = ERR_NOT_EXAMPLE;
        return;
    }
    for (Py_ssize_t i = 0; i < num_wanted; i++) {
        Wanted *w = &wanted[i];
        failure->feature = i;
        if (!w->present) {
            failure->error = ERR_MISSING;
            return;
        }
        const unsigned wanted_field = w->kind == KIND_FLOAT32 ? 2 : 3;
        const Py_ssize_t item = w->kind == KIND_INT64 ? 8 : 4;
        char *row = w->output + record * w->length * item;
        const uint8_t *q = w->feature;
        const uint8_t *end = q ? q + w->feature_length : NULL;
        unsigned list_field = 0;  /* the oneof's case: the last list set */
        Py_ssize_t count = 0;
        while (q && q < end) {
            uint64_t tag;
            const uint8_t *list;
            size_t list_length;
            int error = OK;
            if (!read_tag(&q, end, &tag)) {
                error = ERR_NOT_EXAMPLE;
            } else if ((tag & 7) == 2 && tag >> 3 >= 1 && tag >> 3 <= 3) {
                if (!read_bytes(&q, end, &list, &list_length)) {
                    error = ERR_NOT_EXAMPLE;
                } else {
                    if ((unsigned)(tag >> 3) != list_field) count = 0;  /* a new case */
                    list_field = (unsigned)(tag >> 3);
                    /* The same list given again is merged: its values follow. */
                    if (list_field == wanted_field)
                        error = decode_list(list, list + list_length, w, row, &count);
                }
            } else if (!skip_field(&q, end, tag & 7)) {
                error = ERR_NOT_EXAMPLE;
            }
            if (error != OK) {
                failure->error = error;
                return;
            }
        }
        if (list_field && list_field != wanted_field) {
            failure->error = ERR_WRONG_TYPE;
            failure->count = list_field;
            return;
        }
        if (count != w->length) {
            failure->error = ERR_WRONG_COUNT;
            failure->count = count;
            return;
        }
    }
    failure->feature = -1;
}

/* ---------------------------------------------------------------- Python */
PyDoc_STRVAR(decode_records_doc,
"decode_records(data, offset, max_records, names, outputs, verify_checksums)\n"
"--\n\n"
"Decodes up to max_records TFRecord records of tf.train.Example from data\n"
"(a bytes-like object) at byte offset: feature names[i] into row r of\n"
"outputs[i], a writable C-contiguous [max_records, length] array of int64,\n"
"int32 or float32. Returns (records, next_offset, failure): failure is None,\n"
"or (kind, feature index or -1, count) for the record at index `records`.");

static int kind_of(const Py_buffer *view) {
    const char *format = view->format ? view->format : "B";
    if (*format == '<' || *format == '=' || *format == '@') format++;
    if (view->itemsize == 8 && (*format == 'l' || *format == 'q')) return KIND_INT64;
    if (view->itemsize == 4 && (*format == 'i' || *format == 'l')) return KIND_INT32;
    if (view->itemsize == 4 && *format == 'f') return KIND_FLOAT32;
    return -1;
}

static PyObject *decode_records(PyObject *self, PyObject *args) {
    Py_buffer data;
    Py_ssize_t offset, max_records;
    PyObject *names, *outputs;
    int verify_checksums;
    if (!PyArg_ParseTuple(args, "y*nnO!O!p", &data, &offset, &max_records,
                          &PyTuple_Type, &names, &PyTuple_Type, &outputs,
                          &verify_checksums))
        return NULL;
    Py_ssize_t num_wanted = PyTuple_GET_SIZE(names);
    Wanted *wanted = PyMem_Calloc(num_wanted ? num_wanted : 1, sizeof(Wanted));
    Py_ssize_t acquired = 0;
    PyObject *result = NULL;
    if (!wanted) {
        PyErr_NoMemory();
        goto done;
    }
    if (PyTuple_GET_SIZE(outputs) != num_wanted || offset < 0 || offset > data.len ||
        max_records < 0) {
        PyErr_SetString(PyExc_ValueError, "decode_records: bad arguments");
        goto done;
    }
    for (Py_ssize_t i = 0; i < num_wanted; i++, acquired++) {
        Wanted *w = &wanted[i];
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "decode_records: names must be bytes");
            goto done;
        }
        w->name = PyBytes_AS_STRING(name);
        w->name_length = PyBytes_GET_SIZE(name);
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(outputs, i), &w->view,
                               PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        w->kind = kind_of(&w->view);
        if (w->kind < 0 || w->view.ndim != 2 || w->view.shape[0] < max_records) {
            PyErr_Format(PyExc_ValueError,
                         "decode_records: output %zd must be a [>= %zd, length] array "
                         "of int64, int32 or float32", i, max_records);
            acquired++;
            goto done;
        }
        w->length = w->view.shape[1];
        w->output = w->view.buf;
    }

    const uint8_t *bytes = data.buf;
    const size_t size = (size_t)data.len;
    size_t position = (size_t)offset;
    Py_ssize_t records = 0;
    Failure failure = {OK, -1, 0};
    Py_BEGIN_ALLOW_THREADS
    while (records < max_records && position < size) {
        /* uint64 length, uint32 masked CRC of it, data, uint32 masked CRC */
        if (size - position < 12) {
            failure.error = ERR_TRUNCATED;
            break;
        }
        const uint8_t *header = bytes + position;
        uint64_t length = load_le64(header);
        if (verify_checksums && masked_crc32c(header, 8) != load_le32(header + 8)) {
            failure.error = ERR_LENGTH_CHECKSUM;
            break;
        }
        if (length > size - position - 12 || size - position - 12 - length < 4) {
            failure.error = ERR_TRUNCATED;
            break;
        }
        const uint8_t *record = header + 12;
        if (verify_checksums &&
            masked_crc32c(record, (size_t)length) != load_le32(record + length)) {
            failure.error = ERR_DATA_CHECKSUM;
            break;
        }
        decode_example(record, (size_t)length, wanted, num_wanted, records, &failure);
        if (failure.error != OK) break;
        position += 16 + (size_t)length;
        records++;
    }
    Py_END_ALLOW_THREADS

    if (failure.error == OK)
        result = Py_BuildValue("nnO", records, (Py_ssize_t)position, Py_None);
    else
        result = Py_BuildValue("nn(snn)", records, (Py_ssize_t)position,
                               ERROR_NAMES[failure.error], failure.feature, failure.count);
done:
    for (Py_ssize_t i = 0; i < acquired; i++) PyBuffer_Release(&wanted[i].view);
    PyMem_Free(wanted);
    PyBuffer_Release(&data);
    return result;
}

PyDoc_STRVAR(masked_crc32c_doc,
"masked_crc32c(data, use_tables=False) -> int\n--\n\n"
"TFRecord's masked CRC-32C of a bytes-like object (use_tables: by the\n"
"slicing-by-8 tables even where the CPU has a crc32 instruction).");

static PyObject *py_masked_crc32c(PyObject *self, PyObject *args) {
    Py_buffer data;
    int use_tables = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &data, &use_tables)) return NULL;
    uint32_t crc = use_tables ? crc32c_tables(data.buf, (size_t)data.len)
                              : crc32c(data.buf, (size_t)data.len);
    crc = ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

/* ---------------------------------------------------------------- writing */
static void store_le32(uint8_t *p, uint32_t value) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(value >> (8 * i));
}

/* Bytes of the varint of v (int64 values as their two's complement). */
static inline size_t varint_size(uint64_t v) {
    return 1 + (size_t)(63 - __builtin_clzll(v | 1)) / 7;
}

static inline uint8_t *write_varint(uint8_t *out, uint64_t v) {
    while (v >= 0x80) {
        *out++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *out++ = (uint8_t)v;
    return out;
}

/* Integer element types of the arrays to encode, by buffer format. */
enum { T_INT8, T_UINT8, T_INT16, T_UINT16, T_INT32, T_UINT32, T_INT64, T_UINT64,
       T_FLOAT32 };

static int element_type(const Py_buffer *view) {
    char format = view->format ? view->format[0] : 'B';
    if (format == '<' || format == '=' || format == '@') format = view->format[1];
    const int is_signed = format == 'b' || format == 'h' || format == 'i' ||
                          format == 'l' || format == 'q';
    if (format == 'f' && view->itemsize == 4) return T_FLOAT32;
    if (format == '\0' || !strchr("bBhHiIlLqQ", format)) return -1;
    switch (view->itemsize) {
    case 1: return is_signed ? T_INT8 : T_UINT8;
    case 2: return is_signed ? T_INT16 : T_UINT16;
    case 4: return is_signed ? T_INT32 : T_UINT32;
    case 8: return is_signed ? T_INT64 : T_UINT64;
    default: return -1;
    }
}

/* Value k of a row as protobuf's int64 (sign-extended, then as uint64). */
#define ROW_VALUE(row, type, k)                                                 \
    ((type) == T_INT8 ? (uint64_t)(int64_t)((const int8_t *)(row))[k] :         \
     (type) == T_UINT8 ? (uint64_t)((const uint8_t *)(row))[k] :                \
     (type) == T_INT16 ? (uint64_t)(int64_t)((const int16_t *)(row))[k] :       \
     (type) == T_UINT16 ? (uint64_t)((const uint16_t *)(row))[k] :              \
     (type) == T_INT32 ? (uint64_t)(int64_t)((const int32_t *)(row))[k] :       \
     (type) == T_UINT32 ? (uint64_t)((const uint32_t *)(row))[k] :              \
     ((const uint64_t *)(row))[k])

/* The varint bytes of a row's values; the switch is outside the loop so
 * that each loop is compiled for its element type. */
#define EACH_TYPE(type, BODY)                                                   \
    switch (type) {                                                             \
    case T_INT8: { const int T = T_INT8; BODY; break; }                         \
    case T_UINT8: { const int T = T_UINT8; BODY; break; }                       \
    case T_INT16: { const int T = T_INT16; BODY; break; }                       \
    case T_UINT16: { const int T = T_UINT16; BODY; break; }                     \
    case T_INT32: { const int T = T_INT32; BODY; break; }                       \
    case T_UINT32: { const int T = T_UINT32; BODY; break; }                     \
    default: { const int T = T_INT64; BODY; break; }                            \
    }

static size_t row_payload_size(const char *row, int type, Py_ssize_t count) {
    size_t size = 0;
    if (type == T_FLOAT32) return 4 * (size_t)count;
    EACH_TYPE(type, for (Py_ssize_t k = 0; k < count; k++)
                        size += varint_size(ROW_VALUE(row, T, k)))
    return size;
}

/* Writes a row's values, none past `end` (where pass 1 said the row ends);
 * NULL if they would go past it: the array changed after pass 1 (another
 * thread writing to it). */
static uint8_t *write_row_payload(uint8_t *out, const uint8_t *end, const char *row,
                                  int type, Py_ssize_t count) {
    if (type == T_FLOAT32) {
        if (end - out < 4 * count) return NULL;
        for (Py_ssize_t k = 0; k < count; k++, out += 4) {
            uint32_t bits;
            memcpy(&bits, row + 4 * k, 4);
            store_le32(out, bits);
        }
        return out;
    }
    EACH_TYPE(type, for (Py_ssize_t k = 0; k < count; k++) {
                        uint64_t value = ROW_VALUE(row, T, k);
                        if ((size_t)(end - out) < varint_size(value)) return NULL;
                        out = write_varint(out, value);
                    })
    return out;
}

typedef struct {
    const char *name;
    size_t name_length;
    int type;
    Py_ssize_t count;  /* values per record */
    const char *data;  /* [num_records, count] */
    Py_ssize_t row_bytes;
    Py_buffer view;
} Column;

/* Sizes of one entry's nested messages for a payload of `payload` bytes. */
static inline size_t list_size(size_t payload) {
    /* tag 1, length, values; an empty list has no field (as protobuf writes) */
    return payload ? 1 + varint_size(payload) + payload : 0;
}
static inline size_t feature_size(size_t payload) {
    size_t list = list_size(payload);
    return 1 + varint_size(list) + list;  /* the list's tag, length, message */
}
static inline size_t entry_size(const Column *c, size_t payload) {
    size_t feature = feature_size(payload);
    return 1 + varint_size(c->name_length) + c->name_length +  /* key */
           1 + varint_size(feature) + feature;                 /* value */
}

PyDoc_STRVAR(encode_examples_doc,
"encode_examples(names, arrays, offsets) -> bytes\n--\n\n"
"Serialises N tf.train.Example records: record r holds feature names[i]\n"
"(bytes, given in sorted order) with the values of row r of arrays[i], a\n"
"C-contiguous [N, K] array: float32 as a float_list, any integer type as an\n"
"int64_list. Writes each record's start into offsets (writable int64 [N + 1])\n"
"and returns the records one after the other: the bytes of\n"
"SerializeToString(deterministic=True).");

static PyObject *encode_examples(PyObject *self, PyObject *args) {
    PyObject *names, *arrays, *result = NULL;
    Py_buffer offsets_view;
    if (!PyArg_ParseTuple(args, "O!O!w*", &PyTuple_Type, &names, &PyTuple_Type, &arrays,
                          &offsets_view))
        return NULL;
    const Py_ssize_t num_columns = PyTuple_GET_SIZE(names);
    Column *columns = PyMem_Calloc(num_columns ? num_columns : 1, sizeof(Column));
    size_t *payloads = NULL;
    Py_ssize_t acquired = 0, num_records = -1;
    if (!columns) {
        PyErr_NoMemory();
        goto done;
    }
    if (PyTuple_GET_SIZE(arrays) != num_columns || num_columns == 0) {
        PyErr_SetString(PyExc_ValueError, "encode_examples: one array per name, at "
                        "least one");
        goto done;
    }
    for (Py_ssize_t i = 0; i < num_columns; i++, acquired++) {
        Column *c = &columns[i];
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "encode_examples: names must be bytes");
            goto done;
        }
        c->name = PyBytes_AS_STRING(name);
        c->name_length = (size_t)PyBytes_GET_SIZE(name);
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(arrays, i), &c->view,
                               PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        c->type = element_type(&c->view);
        if (c->type < 0 || c->view.ndim != 2 ||
            (num_records >= 0 && c->view.shape[0] != num_records)) {
            PyErr_Format(PyExc_ValueError, "encode_examples: array %zd must be [N, K] "
                         "of an integer type or float32, N the same for all", i);
            acquired++;
            goto done;
        }
        num_records = c->view.shape[0];
        c->count = c->view.shape[1];
        c->data = c->view.buf;
        c->row_bytes = c->count * c->view.itemsize;
    }
    if (offsets_view.len != (num_records + 1) * 8 || offsets_view.itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "encode_examples: offsets must be int64 "
                        "[N + 1]");
        goto done;
    }
    payloads = PyMem_Malloc((size_t)(num_records * num_columns + 1) * sizeof(size_t));
    if (!payloads) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *offsets = offsets_view.buf;
    /* Pass 1: every record's size, from its payloads' sizes. */
    Py_BEGIN_ALLOW_THREADS
    offsets[0] = 0;
    for (Py_ssize_t r = 0; r < num_records; r++) {
        size_t features = 0;
        for (Py_ssize_t i = 0; i < num_columns; i++) {
            const Column *c = &columns[i];
            size_t payload = row_payload_size(c->data + r * c->row_bytes, c->type,
                                              c->count);
            payloads[r * num_columns + i] = payload;
            size_t entry = entry_size(c, payload);
            features += 1 + varint_size(entry) + entry;
        }
        offsets[r + 1] = offsets[r] + (int64_t)(1 + varint_size(features) + features);
    }
    Py_END_ALLOW_THREADS
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)offsets[num_records]);
    if (!result) goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    int changed = 0;
    /* Pass 2: the bytes. Each payload is written within the size pass 1
     * gave it, so that an array another thread changes meanwhile can only
     * fail the call, never write past the buffer. */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t r = 0; r < num_records; r++) {
        size_t features = 0;
        for (Py_ssize_t i = 0; i < num_columns; i++) {
            size_t entry = entry_size(&columns[i], payloads[r * num_columns + i]);
            features += 1 + varint_size(entry) + entry;
        }
        *out++ = 0x0A;  /* Example.features */
        out = write_varint(out, features);
        for (Py_ssize_t i = 0; i < num_columns; i++) {
            const Column *c = &columns[i];
            const size_t payload = payloads[r * num_columns + i];
            const size_t list = list_size(payload), feature = feature_size(payload);
            *out++ = 0x0A;  /* Features.feature, a map entry */
            out = write_varint(out, entry_size(c, payload));
            *out++ = 0x0A;  /* key */
            out = write_varint(out, c->name_length);
            memcpy(out, c->name, c->name_length);
            out += c->name_length;
            *out++ = 0x12;  /* value: the Feature */
            out = write_varint(out, feature);
            *out++ = c->type == T_FLOAT32 ? 0x12 : 0x1A;  /* float_list, int64_list */
            out = write_varint(out, list);
            if (!payload) continue;
            *out++ = 0x0A;  /* the packed values */
            out = write_varint(out, payload);
            uint8_t *payload_end = out + payload;
            out = write_row_payload(out, payload_end, c->data + r * c->row_bytes, c->type,
                                    c->count);
            if (out != payload_end) {  /* the values changed since pass 1 */
                changed = 1;
                break;
            }
        }
        if (changed) break;
    }
    Py_END_ALLOW_THREADS
    if (changed) {
        Py_CLEAR(result);
        PyErr_SetString(PyExc_RuntimeError, "encode_examples: an array changed while "
                        "it was being encoded");
    }
done:
    for (Py_ssize_t i = 0; i < acquired; i++) PyBuffer_Release(&columns[i].view);
    PyMem_Free(columns);
    PyMem_Free(payloads);
    PyBuffer_Release(&offsets_view);
    return result;
}

PyDoc_STRVAR(frame_records_doc,
"frame_records(data, offsets) -> bytes\n--\n\n"
"TFRecord framing of the records data[offsets[i]:offsets[i + 1]] (offsets: a\n"
"C-contiguous int64 array, non-decreasing, within data): for each, its uint64\n"
"length, the length's masked CRC-32C, the bytes and their masked CRC-32C.");

static PyObject *frame_records(PyObject *self, PyObject *args) {
    Py_buffer data, offsets;
    if (!PyArg_ParseTuple(args, "y*y*", &data, &offsets)) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t num_records = offsets.len / 8 - 1;
    const int64_t *bounds = offsets.buf;
    if (offsets.len % 8 || num_records < 0 || (num_records >= 0 && (bounds[0] < 0 ||
            bounds[num_records] > data.len))) {
        PyErr_SetString(PyExc_ValueError, "frame_records: offsets must be int64 "
                        "within the data");
        goto done;
    }
    for (Py_ssize_t i = 0; i < num_records; i++) {
        if (bounds[i + 1] < bounds[i]) {
            PyErr_SetString(PyExc_ValueError, "frame_records: offsets must not decrease");
            goto done;
        }
    }
    result = PyBytes_FromStringAndSize(
        NULL, (bounds[num_records] - bounds[0]) + 16 * num_records);
    if (!result) goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    const uint8_t *out_end = out + PyBytes_GET_SIZE(result);
    const uint8_t *bytes = data.buf;
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < num_records; i++) {
        /* Read once and checked again: another thread may write to them. */
        const int64_t begin = bounds[i], end = bounds[i + 1];
        if (begin < 0 || end < begin || end > data.len ||
            (uint64_t)(end - begin) + 16 > (uint64_t)(out_end - out)) {
            changed = 1;
            break;
        }
        const uint64_t length = (uint64_t)(end - begin);
        for (int k = 0; k < 8; k++) out[k] = (uint8_t)(length >> (8 * k));
        store_le32(out + 8, masked_crc32c(out, 8));
        memcpy(out + 12, bytes + begin, length);
        store_le32(out + 12 + length, masked_crc32c(out + 12, length));
        out += 16 + length;
    }
    Py_END_ALLOW_THREADS
    if (changed || out != out_end) {
        Py_CLEAR(result);
        PyErr_SetString(PyExc_RuntimeError, "frame_records: the offsets changed while "
                        "the records were being framed");
    }
done:
    PyBuffer_Release(&data);
    PyBuffer_Release(&offsets);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_records", decode_records, METH_VARARGS, decode_records_doc},
    {"masked_crc32c", py_masked_crc32c, METH_VARARGS, masked_crc32c_doc},
    {"frame_records", frame_records, METH_VARARGS, frame_records_doc},
    {"encode_examples", encode_examples, METH_VARARGS, encode_examples_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_record_codec",
    "tf.train.Example records decoded into arrays and encoded from them, and "
    "TFRecord framing (see record_codec.py).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__record_codec(void) {
    init_crc_tables();
#ifdef HAVE_CRC32_INSTRUCTION
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) crc32c = crc32c_instruction;
#endif
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddStringConstant(m, "crc32c_implementation",
                                        crc32c == crc32c_tables ? "tables"
                                                                : "sse4.2") < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
