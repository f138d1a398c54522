/* Arrow columns to TFRecord bytes: tf.train.Example protobufs and TFRecord framing, in one
 * pass over a batch of rows (tfyarn.data.native, through ctypes: no Python headers needed).
 *
 * The bytes equal tfyarn.data.example's (and so TF's deterministic serialization): the
 * caller passes the columns already in protobuf's map-key order, each normalized by pyarrow
 * to int64, float32 or binary values (scalars, or lists of them). A null row leaves its
 * feature out. One call per batch, tfr_write, into a buffer at least as large as the bound
 * the caller works out (columnar.py); it also extends the file's running CRC-32C.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

enum { KIND_BYTES = 0, KIND_FLOAT = 1, KIND_INT64 = 2 };

typedef struct {
    int32_t kind;                 /* KIND_* */
    int32_t is_list;
    const uint8_t *key;           /* the feature's name */
    int64_t key_len;
    const uint8_t *validity;      /* rows' validity bitmap; NULL: no nulls */
    int64_t offset;               /* the rows' array offset (a slice) */
    const int32_t *list_offsets;  /* lists: row i's elements are [lo[off+i], lo[off+i+1]) */
    int64_t values_offset;        /* the values array's own offset */
    const int32_t *value_offsets; /* bytes: value j is data[vo[voff+j] .. vo[voff+j+1]) */
    const void *data;             /* int64s, float32s or the bytes */
} tfr_column;

/* ------------------------------------------------------------------ CRC-32C */

static uint32_t crc_table[8][256];
static int crc_ready;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
    crc_ready = 1;
}

static uint32_t crc_soft(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc; /* little-endian hosts only: x86-64 and aarch64 as built here */
        crc = crc_table[7][w & 0xFF] ^ crc_table[6][(w >> 8) & 0xFF] ^
              crc_table[5][(w >> 16) & 0xFF] ^ crc_table[4][(w >> 24) & 0xFF] ^
              crc_table[3][(w >> 32) & 0xFF] ^ crc_table[2][(w >> 40) & 0xFF] ^
              crc_table[1][(w >> 48) & 0xFF] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("sse4.2"))) static uint32_t crc_hard(uint32_t crc, const uint8_t *p,
                                                             size_t n) {
    uint64_t c = ~crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return ~c32;
}
static int use_hard = -1;
#endif

uint32_t tfr_crc32c(uint32_t crc, const uint8_t *p, size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (use_hard < 0) use_hard = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    if (use_hard) return crc_hard(crc, p, n);
#endif
    if (!crc_ready) crc_init();
    return crc_soft(crc, p, n);
}

static uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u; }

/* ------------------------------------------------------------------ protobuf sizes */

static int64_t varint_size(uint64_t v) {
    int64_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *o, uint64_t v) {
    while (v >= 0x80) {
        *o++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *o++ = (uint8_t)v;
    return o;
}

static int is_null(const tfr_column *c, int64_t row) {
    if (!c->validity) return 0;
    int64_t i = c->offset + row;
    return !((c->validity[i >> 3] >> (i & 7)) & 1);
}

/* The row's values: [first, end) in the values array. */
static void span(const tfr_column *c, int64_t row, int64_t *first, int64_t *end) {
    int64_t i = c->offset + row;
    if (c->is_list) {
        *first = c->values_offset + c->list_offsets[i];
        *end = c->values_offset + c->list_offsets[i + 1];
    } else {
        *first = i;
        *end = i + 1;
    }
}

static int64_t bytes_len(const tfr_column *c, int64_t j) {
    return c->value_offsets[j + 1] - c->value_offsets[j];
}

/* The size of the Feature's list (BytesList / FloatList / Int64List body). */
static int64_t list_size(const tfr_column *c, int64_t first, int64_t end) {
    int64_t n = 0;
    if (first == end) return 0;
    if (c->kind == KIND_BYTES) {
        for (int64_t j = first; j < end; j++) {
            int64_t len = bytes_len(c, j);
            n += 1 + varint_size((uint64_t)len) + len;
        }
        return n;
    }
    if (c->kind == KIND_FLOAT) n = 4 * (end - first);
    else
        for (int64_t j = first; j < end; j++) n += varint_size((uint64_t)((const int64_t *)c->data)[j]);
    return 1 + varint_size((uint64_t)n) + n; /* one packed field */
}

/* Sizes of one map entry: the Feature, the entry's body; returns the whole entry's size
 * (0 for a null row: the feature is left out). */
static int64_t entry_size(const tfr_column *c, int64_t row, int64_t *list, int64_t *feat,
                          int64_t *body) {
    if (is_null(c, row)) return 0;
    int64_t first, end;
    span(c, row, &first, &end);
    *list = list_size(c, first, end);
    *feat = 1 + varint_size((uint64_t)*list) + *list;
    *body = 1 + varint_size((uint64_t)c->key_len) + c->key_len + 1 +
            varint_size((uint64_t)*feat) + *feat;
    return 1 + varint_size((uint64_t)*body) + *body;
}

/* ------------------------------------------------------------------ writing */

static uint8_t *put_list(uint8_t *o, const tfr_column *c, int64_t first, int64_t end,
                         int64_t list) {
    static const uint8_t tags[] = {0x0a, 0x12, 0x1a};
    *o++ = tags[c->kind];
    o = put_varint(o, (uint64_t)list);
    if (first == end) return o;
    if (c->kind == KIND_BYTES) {
        const uint8_t *data = (const uint8_t *)c->data;
        for (int64_t j = first; j < end; j++) {
            int64_t len = bytes_len(c, j);
            *o++ = 0x0a;
            o = put_varint(o, (uint64_t)len);
            memcpy(o, data + c->value_offsets[j], (size_t)len);
            o += len;
        }
        return o;
    }
    *o++ = 0x0a;
    if (c->kind == KIND_FLOAT) {
        o = put_varint(o, (uint64_t)(4 * (end - first)));
        memcpy(o, (const float *)c->data + first, (size_t)(4 * (end - first)));
        return o + 4 * (end - first);
    }
    const int64_t *v = (const int64_t *)c->data;
    int64_t n = 0;
    for (int64_t j = first; j < end; j++) n += varint_size((uint64_t)v[j]);
    o = put_varint(o, (uint64_t)n);
    for (int64_t j = first; j < end; j++) o = put_varint(o, (uint64_t)v[j]);
    return o;
}

typedef struct {
    int64_t list, feat, body, entry;
} sizes;

/* Writes the batch's TFRecords into `out` (at least as large as the caller's bound, see
 * columnar.py), extends *file_crc over them; `scratch` holds ncols sizes. Returns the
 * bytes written. */
int64_t tfr_write(int64_t rows, int32_t ncols, const tfr_column *cols, uint8_t *out,
                  uint32_t *file_crc, void *scratch) {
    sizes *sz = (sizes *)scratch;
    uint8_t *o = out;
    for (int64_t r = 0; r < rows; r++) {
        int64_t features = 0;
        for (int32_t k = 0; k < ncols; k++) {
            sz[k].entry = entry_size(&cols[k], r, &sz[k].list, &sz[k].feat, &sz[k].body);
            features += sz[k].entry;
        }
        int64_t size = 1 + varint_size((uint64_t)features) + features; /* Example.features */
        uint64_t len = (uint64_t)size;
        uint32_t crc;
        for (int b = 0; b < 8; b++) o[b] = (uint8_t)(len >> (8 * b));
        crc = masked(tfr_crc32c(0, o, 8));
        for (int b = 0; b < 4; b++) o[8 + b] = (uint8_t)(crc >> (8 * b));
        uint8_t *data = o + 12;
        o = data;
        *o++ = 0x0a;
        o = put_varint(o, (uint64_t)features);
        for (int32_t k = 0; k < ncols; k++) {
            const tfr_column *c = &cols[k];
            int64_t first, end;
            if (!sz[k].entry) continue;
            span(c, r, &first, &end);
            *o++ = 0x0a;
            o = put_varint(o, (uint64_t)sz[k].body);
            *o++ = 0x0a;
            o = put_varint(o, (uint64_t)c->key_len);
            memcpy(o, c->key, (size_t)c->key_len);
            o += c->key_len;
            *o++ = 0x12;
            o = put_varint(o, (uint64_t)sz[k].feat);
            o = put_list(o, c, first, end, sz[k].list);
        }
        crc = masked(tfr_crc32c(0, data, (size_t)size));
        for (int b = 0; b < 4; b++) *o++ = (uint8_t)(crc >> (8 * b));
    }
    *file_crc = tfr_crc32c(*file_crc, out, (size_t)(o - out));
    return o - out;
}
