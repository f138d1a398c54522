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

/* ------------------------------------------------------------------ reading */

/* One column as the reader fills it: pass 1 counts (values, bytes), the caller sizes the
 * arrays, pass 2 fills them. A scalar column has one slot per row (its first value; a row
 * without the feature, or with an empty list, is not present); a list column, all values. */
typedef struct {
    const uint8_t *key;
    int64_t key_len;
    int32_t kind;
    int32_t is_list;
    int64_t values;          /* counted: values (scalars: rows) */
    int64_t bytes;           /* counted: bytes of BYTES values */
    uint8_t *present;        /* scalars: 1 where the row has a value */
    int32_t *list_offsets;   /* lists: rows + 1 */
    int32_t *value_offsets;  /* bytes: values + 1 */
    void *data;              /* int64s or float32s, one per value, or the bytes */
    int64_t last_row;        /* the row that last held this feature (a repeat is skipped) */
} tfr_field;

enum { READ_CORRUPT_LENGTH = -1, READ_CORRUPT_DATA = -2, READ_MALFORMED = -3,
       READ_KIND = -4 };

static const uint8_t *get_varint(const uint8_t *p, const uint8_t *end, uint64_t *v) {
    uint64_t n = 0;
    for (int shift = 0; p < end && shift < 70; shift += 7) {
        uint8_t b = *p++;
        n |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *v = n;
            return p;
        }
    }
    return NULL;
}

/* Skips a field of wire type `wire`; NULL if it runs past `end`. */
static const uint8_t *skip(const uint8_t *p, const uint8_t *end, int wire) {
    uint64_t n;
    switch (wire) {
    case 0: return get_varint(p, end, &n);
    case 1: return end - p >= 8 ? p + 8 : NULL;
    case 2:
        p = get_varint(p, end, &n);
        return p && (uint64_t)(end - p) >= n ? p + n : NULL;
    case 5: return end - p >= 4 ? p + 4 : NULL;
    default: return NULL;
    }
}

/* Takes value `v` (a varint, 4 float bytes, or a byte string) into the column: pass 1
 * counts, pass 2 stores. `taken`: values this row already took (a scalar takes one). */
static void take(tfr_field *c, int pass, int64_t row, int64_t *taken, uint64_t v,
                 const uint8_t *at, uint64_t len) {
    if (!c->is_list && *taken) return;
    (*taken)++;
    if (pass == 1) {
        if (c->is_list) c->values++;
        if (c->kind == KIND_BYTES) c->bytes += (int64_t)len;
        return;
    }
    int64_t j = c->is_list ? c->values++ : row;
    if (!c->is_list) c->present[row] = 1;
    if (c->kind == KIND_INT64) ((int64_t *)c->data)[j] = (int64_t)v;
    else if (c->kind == KIND_FLOAT) memcpy((float *)c->data + j, at, 4);
    else {
        int32_t start = c->value_offsets[j];
        memcpy((uint8_t *)c->data + start, at, len);
        c->value_offsets[j + 1] = start + (int32_t)len;
    }
}

/* A Feature message into its column; READ_KIND if it holds another kind. */
static int read_feature(tfr_field *c, const uint8_t *p, const uint8_t *end, int pass,
                        int64_t row) {
    int64_t taken = 0;
    while (p < end) {
        uint64_t tag, len;
        if (!(p = get_varint(p, end, &tag))) return READ_MALFORMED;
        int kind = (int)(tag >> 3) == 1 ? KIND_BYTES : (int)(tag >> 3) == 2 ? KIND_FLOAT
                 : (int)(tag >> 3) == 3 ? KIND_INT64 : -1;
        if ((tag & 7) != 2 || kind < 0) {
            if (!(p = skip(p, end, (int)(tag & 7)))) return READ_MALFORMED;
            continue;
        }
        if (kind != c->kind) return READ_KIND;
        if (!(p = get_varint(p, end, &len)) || (uint64_t)(end - p) < len) return READ_MALFORMED;
        const uint8_t *q = p, *lend = p + len;
        p = lend;
        while (q < lend) { /* the list message: field 1, repeated or packed */
            uint64_t ltag, n;
            if (!(q = get_varint(q, lend, &ltag))) return READ_MALFORMED;
            int wire = (int)(ltag & 7);
            if (ltag >> 3 != 1) {
                if (!(q = skip(q, lend, wire))) return READ_MALFORMED;
                continue;
            }
            if (kind == KIND_INT64 && wire == 0) {
                if (!(q = get_varint(q, lend, &n))) return READ_MALFORMED;
                take(c, pass, row, &taken, n, NULL, 0);
            } else if (kind == KIND_FLOAT && wire == 5) {
                if (lend - q < 4) return READ_MALFORMED;
                take(c, pass, row, &taken, 0, q, 4);
                q += 4;
            } else if (wire == 2) {
                if (!(q = get_varint(q, lend, &n)) || (uint64_t)(lend - q) < n)
                    return READ_MALFORMED;
                const uint8_t *vend = q + n;
                if (kind == KIND_BYTES) take(c, pass, row, &taken, 0, q, n);
                else if (kind == KIND_FLOAT) {
                    if (n % 4) return READ_MALFORMED;
                    for (; q < vend; q += 4) take(c, pass, row, &taken, 0, q, 4);
                } else
                    while (q < vend) {
                        uint64_t v;
                        if (!(q = get_varint(q, vend, &v))) return READ_MALFORMED;
                        take(c, pass, row, &taken, v, NULL, 0);
                    }
                q = vend;
            } else
                return READ_MALFORMED;
        }
    }
    return 0;
}

/* A map entry (key, Feature) into the column of that name, if any. */
static int read_entry(tfr_field *cols, int32_t ncols, const uint8_t *p, const uint8_t *end,
                      int pass, int64_t row, int32_t *bad) {
    const uint8_t *key = NULL, *feat = NULL;
    uint64_t key_len = 0, feat_len = 0;
    while (p < end) {
        uint64_t tag, len;
        if (!(p = get_varint(p, end, &tag))) return READ_MALFORMED;
        if ((tag & 7) != 2) {
            if (!(p = skip(p, end, (int)(tag & 7)))) return READ_MALFORMED;
            continue;
        }
        if (!(p = get_varint(p, end, &len)) || (uint64_t)(end - p) < len) return READ_MALFORMED;
        if (tag >> 3 == 1) key = p, key_len = len;
        else if (tag >> 3 == 2) feat = p, feat_len = len;
        p += len;
    }
    if (!key) return 0;
    for (int32_t k = 0; k < ncols; k++) {
        tfr_field *c = &cols[k];
        if ((uint64_t)c->key_len != key_len || memcmp(c->key, key, key_len)) continue;
        if (c->last_row == row) return 0; /* a repeated key: the first one counts */
        c->last_row = row;
        int rc = feat ? read_feature(c, feat, feat + feat_len, pass, row) : 0;
        if (rc == READ_KIND) *bad = k;
        return rc;
    }
    return 0;
}

static int read_example(tfr_field *cols, int32_t ncols, const uint8_t *p, const uint8_t *end,
                        int pass, int64_t row, int32_t *bad) {
    while (p < end) {
        uint64_t tag, len;
        if (!(p = get_varint(p, end, &tag))) return READ_MALFORMED;
        if (tag != 0x0a) {
            if (!(p = skip(p, end, (int)(tag & 7)))) return READ_MALFORMED;
            continue;
        }
        if (!(p = get_varint(p, end, &len)) || (uint64_t)(end - p) < len) return READ_MALFORMED;
        const uint8_t *q = p, *fend = p + len;
        p = fend;
        while (q < fend) { /* Features: map entries, field 1 */
            uint64_t etag, elen;
            if (!(q = get_varint(q, fend, &etag))) return READ_MALFORMED;
            if (etag != 0x0a) {
                if (!(q = skip(q, fend, (int)(etag & 7)))) return READ_MALFORMED;
                continue;
            }
            if (!(q = get_varint(q, fend, &elen)) || (uint64_t)(fend - q) < elen)
                return READ_MALFORMED;
            int rc = read_entry(cols, ncols, q, q + elen, pass, row, bad);
            if (rc) return rc;
            q += elen;
        }
    }
    return 0;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads up to `max_rows` whole records from buf[0, len) into the columns (pass 1 counts,
 * pass 2 fills what pass 1 sized; the same arguments both times). Returns the rows read
 * and sets *consumed (a record cut at the end is left for the next call), or a READ_*
 * error (*bad: the column of a READ_KIND, *consumed: where the bad record starts). */
int64_t tfr_read(const uint8_t *buf, int64_t len, int64_t max_rows, int32_t ncols,
                 tfr_field *cols, int32_t pass, int64_t *consumed, int32_t *bad) {
    int64_t at = 0, row = 0;
    for (int32_t k = 0; k < ncols; k++) {
        cols[k].last_row = -1;
        if (pass == 2) {
            if (cols[k].is_list) cols[k].values = 0, cols[k].list_offsets[0] = 0;
            if (cols[k].kind == KIND_BYTES) cols[k].value_offsets[0] = 0;
        }
    }
    while (row < max_rows && len - at >= 12) {
        const uint8_t *h = buf + at;
        uint64_t size = 0;
        for (int b = 0; b < 8; b++) size |= (uint64_t)h[b] << (8 * b);
        *consumed = at;
        if (masked(tfr_crc32c(0, h, 8)) != le32(h + 8)) return READ_CORRUPT_LENGTH;
        if ((uint64_t)(len - at - 16) < size || len - at < 16) break;
        if (pass == 1 && masked(tfr_crc32c(0, h + 12, size)) != le32(h + 12 + size))
            return READ_CORRUPT_DATA;
        for (int32_t k = 0; k < ncols; k++) {
            tfr_field *c = &cols[k];
            if (pass == 2 && !c->is_list) {
                c->present[row] = 0;
                if (c->kind == KIND_INT64) ((int64_t *)c->data)[row] = 0;
                else if (c->kind == KIND_FLOAT) ((float *)c->data)[row] = 0;
                else c->value_offsets[row + 1] = c->value_offsets[row];
            }
        }
        int rc = read_example(cols, ncols, h + 12, h + 12 + size, pass, row, bad);
        if (rc) return rc;
        for (int32_t k = 0; k < ncols; k++) {
            tfr_field *c = &cols[k];
            if (pass == 1 && !c->is_list) c->values++;
            if (pass == 2 && c->is_list) c->list_offsets[row + 1] = (int32_t)c->values;
        }
        at += 16 + (int64_t)size;
        row++;
    }
    *consumed = at;
    return row;
}
