/* Index points of one shared access, and the overlap of two point sets: the compiled core
 * of tilewave.analysis.index_enumeration (its NumPy path is the reference).
 *
 * An index expression arrives as a postfix program of int64 words. Every point of the
 * grid (the Cartesian product of the axes' values) runs the key program and each condition
 * program on a small stack; arithmetic wraps like NumPy's int64 (unsigned in C, so no
 * undefined behaviour). Anything NumPy would treat differently (a zero divisor, a shift
 * count outside [0, 63], INT64_MIN / -1) returns an error and the caller takes the NumPy
 * path, so both paths always give the same answer.
 */
#include <stdint.h>
#include <string.h>

#define OPS(X) X(const) X(var) X(add) X(sub) X(mul) X(floordiv) X(floormod) X(truncdiv) \
    X(truncmod) X(min) X(max) X(eq) X(ne) X(lt) X(le) X(gt) X(ge) X(and) X(or) X(bitand) \
    X(bitor) X(bitxor) X(shl) X(shr) X(not) X(select)
#define AS_ENUM(name) OP_##name,
#define AS_NAME(name) #name " "
enum { OPS(AS_ENUM) OP_COUNT };

enum {
    TW_OK = 0,
    TW_DIVIDE_BY_ZERO = -1,
    TW_OUT_OF_RANGE = -2,
    TW_BAD_PROGRAM = -3,
    TW_NO_MEMORY = -4,
};

#define STACK_DEPTH 32
#define AXES_MAX 32
#define BLOCK 256 /* points evaluated together: one pass of each operation over a block */
#define RADIX_BITS 11
/* words of block workspace tw_points takes from the end of its scratch */
#define WORKSPACE ((AXES_MAX + STACK_DEPTH + 2) * BLOCK)

/* Words of scratch tw_points needs beyond 4 per grid point. */
int64_t tw_workspace(void) { return WORKSPACE; }

/* Opcode names in opcode order, separated by spaces (the Python side numbers by this). */
const char *tw_opcode_names(void) { return OPS(AS_NAME); }

static int64_t wrap_add(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static int64_t wrap_sub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static int64_t wrap_mul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

static int divide(int op, int64_t a, int64_t b, int64_t *out) {
    if (b == 0) return TW_DIVIDE_BY_ZERO;
    if (a == INT64_MIN && b == -1) return TW_OUT_OF_RANGE;
    int64_t q = a / b, r = a % b;
    switch (op) {
    case OP_floordiv: *out = (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q; return TW_OK;
    case OP_floormod: *out = (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; return TW_OK;
    case OP_truncdiv: *out = q; return TW_OK;
    default: *out = r; return TW_OK;
    }
}

/* Whether code[0..len) is a well-formed program leaving one value within STACK_DEPTH. */
static int well_formed(const int64_t *code, int64_t len, int64_t n_axes) {
    int sp = 0;
    for (int64_t pc = 0; pc < len; pc++) {
        int64_t op = code[pc];
        if (op < 0 || op >= OP_COUNT) return 0;
        if (op == OP_const || op == OP_var) {
            if (pc + 1 >= len) return 0;
            if (op == OP_var && (code[pc + 1] < 0 || code[pc + 1] >= n_axes)) return 0;
            pc++;
            if (++sp > STACK_DEPTH) return 0;
        } else if (op == OP_not) {
            if (sp < 1) return 0;
        } else if (op == OP_select) {
            if (sp < 3) return 0;
            sp -= 2;
        } else {
            if (sp < 2) return 0;
            sp--;
        }
    }
    return sp == 1;
}

static void fill(int64_t *x, int n) {
    for (int j = 1; j < n; j++) x[j] = x[0];
}

/* Floor division and modulus of a[0..n) by a constant c > 1 that is not a power of two:
 * a double-precision quotient corrected by one step (exact for |a| < 2^52; larger values
 * take the integer division). */
static void divide_by_constant(int64_t op, int64_t *a, int n, int64_t c) {
    double inverse = 1.0 / (double)c;
    for (int j = 0; j < n; j++) {
        int64_t x = a[j], q;
        if (x > ((int64_t)1 << 52) || x < -((int64_t)1 << 52)) {
            q = x / c;
            if (x % c != 0 && x < 0) q--;
        } else {
            q = (int64_t)((double)x * inverse);
            int64_t r = x - q * c;
            while (r < 0) { q--; r += c; }
            while (r >= c) { q++; r -= c; }
        }
        a[j] = op == OP_floordiv ? q : x - q * c;
    }
}

/* Runs a well-formed program over n points of a block: vals[axis][j] is axis's value at
 * point j, and every axis but `inner` has one value over the block. The result goes to
 * stack[0][0..n). A stack entry that does not depend on the inner axis is kept as one
 * value (uniform), so a subexpression of the outer axes costs one operation a block, as
 * NumPy's broadcasting makes it cost one per value of its own axes. */
static int run_block(const int64_t *code, int64_t len, int64_t (*vals)[BLOCK], int n,
                     int64_t inner, int64_t (*stack)[BLOCK]) {
    int sp = 0;
    unsigned char uniform[STACK_DEPTH];
    for (int64_t pc = 0; pc < len; pc++) {
        int64_t op = code[pc];
        if (op == OP_const) {
            stack[sp][0] = code[++pc];
            uniform[sp++] = 1;
            continue;
        }
        if (op == OP_var) {
            int64_t axis = code[++pc];
            if (axis == inner) {
                memcpy(stack[sp], vals[axis], (size_t)n * sizeof(int64_t));
                uniform[sp++] = 0;
            } else {
                stack[sp][0] = vals[axis][0];
                uniform[sp++] = 1;
            }
            continue;
        }
        if (op == OP_not) {
            int64_t *x = stack[sp - 1];
            int m = uniform[sp - 1] ? 1 : n;
            for (int j = 0; j < m; j++) x[j] = x[j] == 0;
            continue;
        }
        if (op == OP_select) {
            int64_t *c = stack[sp - 3], *t = stack[sp - 2], *f = stack[sp - 1];
            int all = uniform[sp - 3] && uniform[sp - 2] && uniform[sp - 1];
            int m = all ? 1 : n;
            for (int k = sp - 3; k < sp && !all; k++)
                if (uniform[k]) fill(stack[k], n);
            for (int j = 0; j < m; j++) c[j] = c[j] != 0 ? t[j] : f[j];
            sp -= 2;
            uniform[sp - 1] = (unsigned char)all;
            continue;
        }
        int64_t *a = stack[sp - 2], *b = stack[sp - 1];
        int a_uniform = uniform[sp - 2], b_uniform = uniform[sp - 1];
        int both = a_uniform && b_uniform;
        int m = both ? 1 : n;
        sp--;
        uniform[sp - 1] = (unsigned char)both;
        int64_t divisor = b[0];
        if ((op == OP_floordiv || op == OP_floormod) && b_uniform && divisor > 1) {
            if (a_uniform && !both) fill(a, n);
            if ((divisor & (divisor - 1)) == 0) {
                int shift = 0;
                while (((int64_t)1 << shift) != divisor) shift++;
                if (op == OP_floordiv) /* arithmetic shift: floor division, negatives too */
                    for (int j = 0; j < m; j++) a[j] >>= shift;
                else /* two's complement mask: floor modulus of a positive divisor */
                    for (int j = 0; j < m; j++) a[j] &= divisor - 1;
            } else {
                divide_by_constant(op, a, m, divisor);
            }
            continue;
        }
        if (!both) { /* one side uniform: spread it over the block */
            if (a_uniform) fill(a, n);
            if (b_uniform) fill(b, n);
        }
        switch (op) {
#define EACH(expr) for (int j = 0; j < m; j++) a[j] = (expr); break
        case OP_add: EACH(wrap_add(a[j], b[j]));
        case OP_sub: EACH(wrap_sub(a[j], b[j]));
        case OP_mul: EACH(wrap_mul(a[j], b[j]));
        case OP_min: EACH(a[j] < b[j] ? a[j] : b[j]);
        case OP_max: EACH(a[j] > b[j] ? a[j] : b[j]);
        case OP_eq: EACH(a[j] == b[j]);
        case OP_ne: EACH(a[j] != b[j]);
        case OP_lt: EACH(a[j] < b[j]);
        case OP_le: EACH(a[j] <= b[j]);
        case OP_gt: EACH(a[j] > b[j]);
        case OP_ge: EACH(a[j] >= b[j]);
        case OP_and: EACH(a[j] != 0 && b[j] != 0);
        case OP_or: EACH(a[j] != 0 || b[j] != 0);
        case OP_bitand: EACH(a[j] & b[j]);
        case OP_bitor: EACH(a[j] | b[j]);
        case OP_bitxor: EACH(a[j] ^ b[j]);
#undef EACH
        case OP_shl: case OP_shr:
            for (int j = 0; j < m; j++) {
                if (b[j] < 0 || b[j] > 63) return TW_OUT_OF_RANGE;
                /* >> of a negative value is arithmetic on gcc/clang, as NumPy's right_shift */
                a[j] = op == OP_shl ? (int64_t)((uint64_t)a[j] << b[j]) : a[j] >> b[j];
            }
            break;
        default: /* the four divisions */
            for (int j = 0; j < m; j++) {
                int status = divide((int)op, a[j], b[j], &a[j]);
                if (status != TW_OK) return status;
            }
        }
    }
    if (uniform[0]) fill(stack[0], n);
    return TW_OK;
}

typedef struct { int64_t key, thread; } point_t;

/* Sorts points by key (LSD radix over the key's offset from the least one, range the
 * greatest offset; stable), using other (n points) as the second buffer. */
static void sort_by_key(point_t *points, point_t *other, int64_t n, int64_t least,
                        uint64_t range) {
    if (n < 2 || range == 0) return;
    point_t *from = points, *to = other;
    int64_t counts[1 << RADIX_BITS];
    for (int shift = 0; shift < 64 && (range >> shift) != 0; shift += RADIX_BITS) {
        memset(counts, 0, sizeof(counts));
        for (int64_t i = 0; i < n; i++)
            counts[(((uint64_t)from[i].key - (uint64_t)least) >> shift) & ((1 << RADIX_BITS) - 1)]++;
        int64_t total = 0;
        for (int d = 0; d < (1 << RADIX_BITS); d++) {
            int64_t c = counts[d];
            counts[d] = total;
            total += c;
        }
        for (int64_t i = 0; i < n; i++) {
            uint64_t digit = (((uint64_t)from[i].key - (uint64_t)least) >> shift)
                             & ((1 << RADIX_BITS) - 1);
            to[counts[digit]++] = from[i];
        }
        point_t *swap = from;
        from = to;
        to = swap;
    }
    if (from != points) memcpy(points, from, (size_t)n * sizeof(point_t));
}

/* Groups points by key into out_* (distinct keys ascending, lowest and highest thread of
 * each); returns the number of keys. spare: room for 2n + 3 * table words. Keys within a
 * range that fits the table are grouped in it, indexed by key; the others after a radix
 * sort. */
static int64_t group(point_t *points, int64_t n, int64_t *spare, int64_t table,
                     int64_t *out_keys, int64_t *out_lo, int64_t *out_hi) {
    if (n == 0) return 0;
    int64_t least = points[0].key, most = points[0].key;
    for (int64_t i = 1; i < n; i++) {
        if (points[i].key < least) least = points[i].key;
        if (points[i].key > most) most = points[i].key;
    }
    uint64_t range = (uint64_t)most - (uint64_t)least;
    if (range < (uint64_t)table && range <= 4 * (uint64_t)n + 4096) { /* a dense range */
        int64_t width = (int64_t)range + 1;
        int64_t *lo = spare + 2 * n, *hi = lo + width, *seen = hi + width;
        memset(seen, 0, (size_t)width * sizeof(int64_t));
        for (int64_t i = 0; i < n; i++) {
            int64_t at = (int64_t)((uint64_t)points[i].key - (uint64_t)least);
            int64_t thread = points[i].thread;
            if (!seen[at]) {
                seen[at] = 1;
                lo[at] = hi[at] = thread;
            } else {
                if (thread < lo[at]) lo[at] = thread;
                if (thread > hi[at]) hi[at] = thread;
            }
        }
        int64_t groups = 0;
        for (int64_t at = 0; at < width; at++) {
            if (!seen[at]) continue;
            out_keys[groups] = (int64_t)((uint64_t)least + (uint64_t)at);
            out_lo[groups] = lo[at];
            out_hi[groups] = hi[at];
            groups++;
        }
        return groups;
    }
    sort_by_key(points, (point_t *)spare, n, least, range);
    int64_t groups = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t thread = points[i].thread;
        if (i == 0 || points[i].key != points[i - 1].key) {
            out_keys[groups] = points[i].key;
            out_lo[groups] = out_hi[groups] = thread;
            groups++;
        } else {
            if (thread < out_lo[groups - 1]) out_lo[groups - 1] = thread;
            if (thread > out_hi[groups - 1]) out_hi[groups - 1] = thread;
        }
    }
    return groups;
}

/* The points of one access over the grid of axes (the first n_threads of them thread
 * axes, their ids combined with strides from the thread extents), grouped by key: distinct
 * keys ascending at out[0..), the lowest and highest thread at each at out[capacity..) and
 * out[2 * capacity..).
 *
 * program: n_programs start offsets, n_programs lengths, n_threads thread extents, then
 * the programs' words (offsets count from there). Program 0 is the address, the others
 * conditions (a point counts where every condition is nonzero).
 * input: n_axes axis lengths, n_axes start offsets (into the values), n_ties tied axes,
 * n_ties offsets, n_ties counts, then the axes' values (the last axis varies fastest).
 * A tie adds (axis value - offset) * span to the key, span from 2^24 times (count + 2)
 * per tie. scratch: at least 4 words per grid point and tw_workspace() more (beyond that,
 * keys in a range of up to a third of the excess are grouped without sorting). capacity: at least the number of
 * grid points. Returns the number of distinct keys, or a negative error. */
int64_t tw_points(const int64_t *program, int64_t n_programs, int64_t n_threads,
                  const int64_t *input, int64_t n_axes, int64_t n_ties, int64_t *scratch,
                  int64_t scratch_len, int64_t *out, int64_t capacity) {
    const int64_t *program_start = program, *program_len = program + n_programs;
    const int64_t *thread_extents = program_len + n_programs;
    const int64_t *programs = thread_extents + n_threads;
    const int64_t *axis_len = input, *axis_start = input + n_axes;
    const int64_t *tie_axis = axis_start + n_axes, *tie_offset = tie_axis + n_ties;
    const int64_t *tie_count = tie_offset + n_ties, *axis_values = tie_count + n_ties;
    int64_t *out_keys = out, *out_lo = out + capacity, *out_hi = out + 2 * capacity;
    if (n_programs < 1 || n_axes > AXES_MAX || n_threads > n_axes) return TW_BAD_PROGRAM;
    for (int64_t i = 0; i < n_programs; i++)
        if (!well_formed(programs + program_start[i], program_len[i], n_axes))
            return TW_BAD_PROGRAM;
    for (int64_t t = 0; t < n_ties; t++)
        if (tie_axis[t] < 0 || tie_axis[t] >= n_axes) return TW_BAD_PROGRAM;
    int64_t size = 1;
    for (int64_t i = 0; i < n_axes; i++) size *= axis_len[i];
    if (size == 0) return 0;
    if (scratch_len < 4 * size + WORKSPACE || capacity < size) return TW_NO_MEMORY;
    /* the block workspace sits at the end of the scratch, the points at its start */
    int64_t (*vals)[BLOCK] = (int64_t (*)[BLOCK])(scratch + scratch_len - WORKSPACE);
    int64_t (*stack)[BLOCK] = vals + AXES_MAX;
    int64_t *key = stack[STACK_DEPTH];
    int64_t *keep = key + BLOCK;
    scratch_len -= WORKSPACE;
    point_t *points = (point_t *)scratch;
    int status = TW_OK;
    int64_t kept = 0;
    /* the longest axis runs innermost, in blocks; the others by odometer (the grouped
     * result does not depend on the order points are made in) */
    int64_t inner = 0;
    for (int64_t i = 1; i < n_axes; i++)
        if (axis_len[i] > axis_len[inner]) inner = i;
    int64_t inner_len = n_axes ? axis_len[inner] : 1;
    int64_t at[AXES_MAX] = {0};
    for (int64_t outer = 0; outer < size / inner_len; outer++) {
        for (int64_t first = 0; first < inner_len; first += BLOCK) {
            int n = inner_len - first < BLOCK ? (int)(inner_len - first) : BLOCK;
            for (int64_t i = 0; i < n_axes; i++) {
                if (i == inner) {
                    memcpy(vals[i], axis_values + axis_start[i] + first,
                           (size_t)n * sizeof(int64_t));
                } else {
                    int64_t v = axis_values[axis_start[i] + at[i]];
                    for (int j = 0; j < n; j++) vals[i][j] = v;
                }
            }
            for (int64_t i = 0; i < n_programs; i++) {
                status = run_block(programs + program_start[i], program_len[i], vals, n, inner,
                                   stack);
                if (status != TW_OK) goto done;
                if (i == 0) {
                    memcpy(key, stack[0], (size_t)n * sizeof(int64_t));
                    for (int j = 0; j < n; j++) keep[j] = 1;
                } else {
                    for (int j = 0; j < n; j++) keep[j] &= stack[0][j] != 0;
                }
            }
            for (int j = 0; j < n; j++) {
                if (!keep[j]) continue;
                int64_t k = key[j], span = (int64_t)1 << 24;
                for (int64_t t = 0; t < n_ties; t++) {
                    k = wrap_add(k, wrap_mul(wrap_sub(vals[tie_axis[t]][j], tie_offset[t]), span));
                    span = wrap_mul(span, tie_count[t] + 2);
                }
                int64_t thread = 0, stride = 1;
                for (int64_t t = 0; t < n_threads; t++) {
                    thread = wrap_add(thread, wrap_mul(vals[t][j], stride));
                    stride = wrap_mul(stride, thread_extents[t]);
                }
                points[kept].key = k;
                points[kept].thread = thread;
                kept++;
            }
        }
        for (int64_t i = n_axes - 1; i >= 0; i--) {
            if (i == inner) continue;
            if (++at[i] < axis_len[i]) break;
            at[i] = 0;
        }
    }
    kept = group(points, kept, scratch + 2 * size, (scratch_len - 4 * size) / 3, out_keys,
                 out_lo, out_hi);
done:
    return status != TW_OK ? status : kept;
}

/* Whether two grouped point sets share a key touched by two different threads (by any
 * threads when ordered is 0). A set of n keys is n keys ascending, then the lowest thread
 * at each, then the highest (as tw_points writes them). */
int64_t tw_overlap(const int64_t *a, int64_t a_size, const int64_t *b, int64_t b_size,
                   int64_t ordered) {
    const int64_t *a_lo = a + a_size, *a_hi = a + 2 * a_size;
    const int64_t *b_lo = b + b_size, *b_hi = b + 2 * b_size;
    int64_t i = 0, j = 0;
    while (i < a_size && j < b_size) {
        if (a[i] < b[j]) { i++; continue; }
        if (b[j] < a[i]) { j++; continue; }
        if (!ordered) return 1;
        if (a_lo[i] != a_hi[i] || b_lo[j] != b_hi[j] || a_lo[i] != b_lo[j]) return 1;
        i++;
        j++;
    }
    return 0;
}

/* Two grouped point sets as one (a merged set, as tw_points writes one): every key of
 * either, ascending, with the lowest and the highest thread either has there. out has room
 * for 3 * (a_size + b_size) words; returns the number of keys written. */
int64_t tw_merge(const int64_t *a, int64_t a_size, const int64_t *b, int64_t b_size,
                 int64_t *out) {
    const int64_t *a_lo = a + a_size, *a_hi = a + 2 * a_size;
    const int64_t *b_lo = b + b_size, *b_hi = b + 2 * b_size;
    int64_t i = 0, j = 0, n = 0;
    while (i < a_size || j < b_size) { /* first the count: the thread words follow the keys */
        if (j == b_size || (i < a_size && a[i] < b[j])) i++;
        else if (i == a_size || b[j] < a[i]) j++;
        else { i++; j++; }
        n++;
    }
    int64_t *lo = out + n, *hi = out + 2 * n;
    i = j = 0;
    for (int64_t k = 0; k < n; k++) {
        if (j == b_size || (i < a_size && a[i] < b[j])) {
            out[k] = a[i]; lo[k] = a_lo[i]; hi[k] = a_hi[i]; i++;
        } else if (i == a_size || b[j] < a[i]) {
            out[k] = b[j]; lo[k] = b_lo[j]; hi[k] = b_hi[j]; j++;
        } else {
            out[k] = a[i];
            lo[k] = a_lo[i] < b_lo[j] ? a_lo[i] : b_lo[j];
            hi[k] = a_hi[i] > b_hi[j] ? a_hi[i] : b_hi[j];
            i++; j++;
        }
    }
    return n;
}
