/* One decoding step of an RWKV-6 or RWKV-7 language model, batch 1, with its block linears either fp32 or 4-bit.
 *
 * Built by runtimes/rwkv_c_rt.py (gcc -O3 -mavx2 -mfma -fopenmp) and called through ctypes; the Python side owns
 * every array (weights, state, scratch) and fills the structs below with pointers into them.
 *
 * 4-bit linears (group g, 32 or a multiple of 64, along the input): per output row and group, 4-bit codes q, an fp32
 * scale s and an integer zero point z, so w = s (q - z). Within every 64 inputs of a row, byte j holds code j in
 * its low nibble and code j + 32 in its high one, so one 32-byte load and two masks give the 64 codes in input
 * order; rows come in quads whose 32-byte pieces are interleaved (see dot_quad_g).
 * The activation is quantized per group to int8 (scale max|x| / 127, the way onnxruntime's MatMulNBits does it at
 * accuracy_level 4), and a row's group contributes s * xs * (sum_j q_j xq_j - z sum_j xq_j): the integer dot
 * product runs on _mm256_maddubs_epi16 (unsigned codes times signed activations), 64 weights per 3 loads.
 * 8-bit linears (the exact form of codebook/VQ layers, whose every weight is an 8-bit codebook code times the
 * codebook's scale plus its offset, and of wider SQ codes): signed codes q, per row and group a scale s and an
 * offset o, w = s q + o, in the same quad layout with 64 bytes per row and 64 inputs. The products run on
 * maddubs(|q|, sign(xq, q)) and the offsets through the activation group's sum.
 * fp32 linears: an FMA dot product per row; a matrix wider than 2048 inputs comes in column panels (Mat.panel).
 * This is the step a decoder is bound by: every weight byte read once per token.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    int rows, cols, group; /* group 0: fp32 weight w (rows x cols); else bits-bit codes (rows a multiple of 4) */
    int bits;              /* 4: q, s, z, w = s (q - z); 8: q (signed), s, o, w = s q + o */
    int panel;             /* fp32: 0, w row-major; else w in column panels of this width (the last may be narrower),
                            * panel after panel, each rows x its width row-major (see run_units) */
    const float *w;
    const uint8_t *q;      /* 4 bits: [rows / 4][cols / 64][4 rows][32 bytes]; 8 bits: [..][4 rows][64 bytes] */
    const float *s;        /* [rows / 4][cols / group][4 rows] */
    const uint8_t *z;      /* 4 bits: [rows / 4][cols / group][4 rows] */
    const float *o;        /* 8 bits: [rows / 4][cols / group][4 rows] */
} Mat;

typedef struct {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    const float *x_r, *x_w, *x_k, *x_v, *x_a, *x_g;
    const float *w0, *a0, *v0, *k_k, *k_a, *r_k, *lnx_w, *lnx_b, *ffn_x_k;
    Mat w1, w2, a1, a2, v1, v2, g1, g2; /* LoRAs, each stored (out, in) */
    Mat r, k, v, o, fk, fv;
} Layer;

typedef struct { /* RWKV-6: data-dependent token shift (maa LoRA), decay LoRA, gate, channel-mix receptance */
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    const float *maa_x, *maa_w, *maa_k, *maa_v, *maa_r, *maa_g, *time_decay, *faaaa, *lnx_w, *lnx_b;
    const float *ffn_maa_k, *ffn_maa_r;
    Mat maa1, maa2[5], dec1, dec2; /* LoRAs, each stored (out, in); maa1 gives the 5 mixes' hidden values at once */
    Mat r, k, v, o, g, fk, fr, fv;
} Layer6;

typedef struct {
    int n_layer, C, H, N, V, F, D, version; /* D: the widest LoRA (RWKV-6: 5 x the mix LoRA, or the decay LoRA) */
    const float *emb, *ln0_w, *ln0_b, *lnout_w, *lnout_b;
    Mat head;
    const void *layers;            /* Layer (RWKV-7) or Layer6 (RWKV-6), n_layer of them */
    float *att_x, *ffn_x, *wkv;    /* state: L x C, L x C, L x H x N x N ([value, key]) */
    float *scratch;                /* 19 C + F + 5 D floats: see time_mix and channel_mix */
    int8_t *xq;                    /* MAX_JOBS slots of max(C, F) int8: each 4-bit product's quantized input */
    float *xs;                     /* MAX_JOBS slots of max(C, F) / MIN_GROUP + 1 */
    float *xsx;                    /* the same: xs times the group's code sum */
} Model;

static int n_threads = 1;

int rwkv_set_threads(int n) {
#ifdef _OPENMP
    n_threads = n > 0 ? n : omp_get_num_procs();
    omp_set_num_threads(n_threads);
#else
    n_threads = 1;
#endif
    return n_threads;
}

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#ifndef PREFETCH_F32
#define PREFETCH_F32 2048 /* the default distance, bytes ahead of an fp32 row, that the dot product asks the cache for */
#endif

/* The fp32 dot product's software prefetch distance (bytes; 0: none, the hardware prefetcher alone). Its best value
 * is the machine's: 2 KB took fp32 decode from 51.9 to 67.3 tokens/s on an Emerald Rapids VM, yet cost about 8% of
 * the read rate on a Zen 4 VM, whose hardware prefetcher streams faster alone. rwkv_c_rt.py measures the choice
 * once per machine (tuned_prefetch_f32) and sets it here; it never changes a result, only the speed. */
static int prefetch_f32 = PREFETCH_F32;

int rwkv_set_prefetch_f32(int bytes) {
    if (bytes >= 0) prefetch_f32 = bytes;
    return prefetch_f32;
}

/* PF a constant where it is 0, so that loop carries no prefetch at all. */
static inline __attribute__((always_inline)) float dot_f32_pf(const float *w, const float *x, int n, const int pf) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 32 <= n; j += 32) {
        if (pf) {
            _mm_prefetch((const char *)(w + j) + pf, _MM_HINT_T0);
            _mm_prefetch((const char *)(w + j) + pf + 64, _MM_HINT_T0);
        }
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 8), _mm256_loadu_ps(x + j + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 16), _mm256_loadu_ps(x + j + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 24), _mm256_loadu_ps(x + j + 24), a3);
    }
    float t = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; j < n; j++) t += w[j] * x[j];
    return t;
}

static float dot_f32(const float *w, const float *x, int n) {
    return prefetch_f32 ? dot_f32_pf(w, x, n, prefetch_f32) : dot_f32_pf(w, x, n, 0);
}

/* y = W x for a rows x cols fp32 matrix on the calling thread: what the prefetch tuning times. */
int rwkv_f32_rows(const float *w, int rows, int cols, const float *x, float *y) {
    for (int r = 0; r < rows; r++) y[r] = dot_f32(w + (long)r * cols, x, cols);
    return 0;
}

/* x -> int8 codes per group of `group` (a multiple of 32; scale max|x| / 127, rounded to nearest even as
 * nearbyintf does), each group's scale xs and xs times its code sum. */
static void quantize_act(const float *x, int n, int group, int8_t *xq, float *xs, float *xsx) {
    const __m256 sign = _mm256_set1_ps(-0.f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int g = 0; g < n / group; g++) {
        const float *xg = x + g * group;
        __m256 mx = _mm256_setzero_ps();
        for (int j = 0; j < group; j += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(xg + j)));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float m = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        const __m256 inv = _mm256_set1_ps(m > 0.f ? 127.f / m : 0.f);
        __m256i sum = _mm256_setzero_si256();
        for (int j = 0; j < group; j += 32) {
            __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + j), inv));
            __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + j + 8), inv));
            __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + j + 16), inv));
            __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(xg + j + 24), inv));
            sum = _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
            __m256i b8 = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
            _mm256_storeu_si256((__m256i *)(xq + g * group + j), _mm256_permutevar8x32_epi32(b8, order));
        }
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
        xs[g] = m / 127.f;
        xsx[g] = xs[g] * (float)_mm_cvtsi128_si32(s4);
    }
}

#ifndef PREFETCH
#define PREFETCH 2048 /* bytes ahead of the 4-bit stream that the kernel asks the cache for (1024-8192 measured; 2048-3072 best) */
#endif

/* Group g's scales (and zero points or offsets) applied to the four rows' integer sums `is`: acc += s xs is,
 * off += o xs sum(xq) (4 bits: o = -s z). */
static inline __attribute__((always_inline)) void close_group(const Mat *w, int quad, int ng, int g, const float *xs,
                                                               const float *xsx, const __m256i is[4], __m256 acc[4],
                                                               __m128 *off, const int BITS) {
    const __m128 s4 = _mm_loadu_ps(w->s + (long)quad * 4 * ng + 4 * g);
    __m128 o4;
    if (BITS == 4) {
        int32_t z4i;
        memcpy(&z4i, w->z + (long)quad * 4 * ng + 4 * g, 4);
        o4 = _mm_sub_ps(_mm_setzero_ps(), _mm_mul_ps(s4, _mm_cvtepi32_ps(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(z4i)))));
    } else {
        o4 = _mm_loadu_ps(w->o + (long)quad * 4 * ng + 4 * g);
    }
    *off = _mm_fmadd_ps(o4, _mm_set1_ps(xsx[g]), *off);
    float sc[4];
    _mm_storeu_ps(sc, _mm_mul_ps(s4, _mm_set1_ps(xs[g])));
    for (int r = 0; r < 4; r++) acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r]), _mm256_set1_ps(sc[r]), acc[r]);
}

/* Rows 4 quad .. 4 quad + 3 of a 4- or 8-bit matrix (BITS). The four rows' codes are interleaved in the file,
 * 32 (4-bit) or 64 (8-bit) bytes each per 64 inputs, so the quad reads one sequential stream (the hardware
 * prefetcher keeps up with one stream; with four separate rows it fell to half the read bandwidth). Their scales
 * and zero points (offsets) are interleaved by group the same way. The activation codes are loaded once for the
 * four rows. 4 bits: unsigned codes on maddubs directly, the zero point entering as the offset -s z. 8 bits:
 * |q| <= 128 and |xq| <= 127, so maddubs(|q|, sign(xq, q))'s pair sums (<= 32512) do not saturate; each 32-byte
 * half goes to 32 bits on its own. Group G is 32 or a multiple of 64; at 32 the two halves of every 64 inputs
 * (the low and high nibbles, or the two 32-byte loads) are two groups and keep separate sums. */
static inline __attribute__((always_inline)) void dot_quad_g(const Mat *w, int quad, const int8_t *xq,
                                                              const float *xs, const float *xsx, float *y,
                                                              const int G, const int BITS) {
    /* row_bytes: a row's per 64 inputs; step: the inputs between closes (two groups of 32 at G = 32) */
    const int ng = w->cols / G, row_bytes = BITS * 8, step = G < 64 ? 64 : G;
    const __m256i mask = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    const uint8_t *q = w->q + (long)quad * BITS / 2 * w->cols;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    __m128 off = _mm_setzero_ps(); /* sum_g o xs sum(xq), one lane per row */
    for (int c0 = 0; c0 < w->cols; c0 += step) {
        __m256i is[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                         _mm256_setzero_si256()};
        __m256i hi[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                         _mm256_setzero_si256()}; /* G = 32: the second group's sums */
        for (int c = c0; c < c0 + step; c += 64) {
            const __m256i x0 = _mm256_loadu_si256((const __m256i *)(xq + c));
            const __m256i x1 = _mm256_loadu_si256((const __m256i *)(xq + c + 32));
            for (int line = 0; line < BITS / 2; line++)
                _mm_prefetch((const char *)(q + PREFETCH + 64 * line), _MM_HINT_T0);
            for (int r = 0; r < 4; r++) {
                __m256i p0, p1;
                if (BITS == 4) {
                    const __m256i b = _mm256_loadu_si256((const __m256i *)(q + 32 * r));
                    p0 = _mm256_maddubs_epi16(_mm256_and_si256(b, mask), x0);
                    p1 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(b, 4), mask), x1);
                    if (G == 32) {
                        p0 = _mm256_madd_epi16(p0, ones);
                        p1 = _mm256_madd_epi16(p1, ones);
                    } else {
                        p0 = _mm256_madd_epi16(_mm256_add_epi16(p0, p1), ones); /* 15 * 127 * 4 fits in 16 bits */
                    }
                } else {
                    const __m256i b0 = _mm256_loadu_si256((const __m256i *)(q + 64 * r));
                    const __m256i b1 = _mm256_loadu_si256((const __m256i *)(q + 64 * r + 32));
                    p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(b0), _mm256_sign_epi8(x0, b0)), ones);
                    p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(b1), _mm256_sign_epi8(x1, b1)), ones);
                    if (G != 32) p0 = _mm256_add_epi32(p0, p1);
                }
                is[r] = _mm256_add_epi32(is[r], p0);
                if (G == 32) hi[r] = _mm256_add_epi32(hi[r], p1);
            }
            q += 4 * row_bytes;
        }
        close_group(w, quad, ng, c0 / G, xs, xsx, is, acc, &off, BITS);
        if (G == 32) close_group(w, quad, ng, c0 / G + 1, xs, xsx, hi, acc, &off, BITS);
    }
    float o[4];
    _mm_storeu_ps(o, off);
    for (int r = 0; r < 4; r++) y[4 * quad + r] = hsum8(acc[r]) + o[r];
}

/* The group and the width as constants (the group where it is the usual 64: one step per group, no inner loop). */
static void dot_quad(const Mat *w, int quad, const int8_t *xq, const float *xs, const float *xsx, float *y) {
    if (w->bits == 8) {
        if (w->group == 64)
            dot_quad_g(w, quad, xq, xs, xsx, y, 64, 8);
        else if (w->group == 32)
            dot_quad_g(w, quad, xq, xs, xsx, y, 32, 8);
        else
            dot_quad_g(w, quad, xq, xs, xsx, y, w->group, 8);
    } else if (w->group == 64)
        dot_quad_g(w, quad, xq, xs, xsx, y, 64, 4);
    else if (w->group == 32)
        dot_quad_g(w, quad, xq, xs, xsx, y, 32, 4);
    else
        dot_quad_g(w, quad, xq, xs, xsx, y, w->group, 4);
}

/* One product of a batch: y = W x. */
typedef struct {
    const Mat *w;
    const float *x;
    float *y;
} Job;

/* MAX_JOBS (products batched into one parallel region) and MIN_GROUP (the smallest activation group, which
 * sizes the scale slots) come from the compiler flags of rwkv_c_rt.py, which allocates the buffers. */
#if !defined(MAX_JOBS) || !defined(MIN_GROUP)
#error "compile with -DMAX_JOBS=... -DMIN_GROUP=... (rwkv_c_rt.py passes both)"
#endif
#define FP32_ROWS 16 /* rows of an fp32 matrix per unit of work */

static inline int job_units(const Mat *w) { return w->group ? w->rows / 4 : (w->rows + FP32_ROWS - 1) / FP32_ROWS; }

/* Bytes a unit of work reads: what the threads split evenly. */
static inline long unit_bytes(const Mat *w) {
    if (!w->group) return 4L * FP32_ROWS * w->cols;
    return w->bits == 8 ? 4L * w->cols + 8L * 4 * w->cols / w->group : 2L * w->cols + 5L * 4 * w->cols / w->group;
}

/* Units u0 .. u1 - 1 of one product. A wide fp32 matrix is read panel by panel: its rows' partial sums over the
 * first panel, then the second, ... The input's slice that a panel reads stays in the L1 cache (8 KB at the
 * panel width of 2048 floats or less that rwkv_c_rt.py picks); over a whole 7168-float row it did not, and rows of
 * fv (2048 x 7168) streamed at 14.5-16 GB/s against 23-25 for the same bytes as panels on a Zen 4 VM. Each row's
 * sum is taken in the same order (panel 0, 1, ...) whatever the thread count. */
static void run_units(const Job *j, long u0, long u1, const int8_t *xq, const float *xs, const float *xsx) {
    const Mat *w = j->w;
    if (w->group) {
        for (long u = u0; u < u1; u++) dot_quad(w, (int)u, xq, xs, xsx, j->y);
        return;
    }
    const int r0 = (int)u0 * FP32_ROWS, r1 = u1 * FP32_ROWS < w->rows ? (int)u1 * FP32_ROWS : w->rows;
    if (!w->panel || w->panel >= w->cols) {
        for (int r = r0; r < r1; r++) j->y[r] = dot_f32(w->w + (long)r * w->cols, j->x, w->cols);
        return;
    }
    for (int c0 = 0; c0 < w->cols; c0 += w->panel) {
        const int width = c0 + w->panel <= w->cols ? w->panel : w->cols - c0;
        const float *p = w->w + (long)w->rows * c0; /* the panels before this one are all full width */
        for (int r = r0; r < r1; r++) {
            const float t = dot_f32(p + (long)r * width, j->x + c0, width);
            j->y[r] = c0 ? j->y[r] + t : t;
        }
    }
}

/* Every product of a batch (independent of each other) in one parallel region: each quantized job's input is
 * quantized into its own slot first, then the threads take contiguous shares of the batch's bytes. A row is
 * always computed by the same code, so the result does not depend on the thread count. */
static void gemv_batch(const Model *m, const Job *jobs, int n) {
    const int width = m->C > m->F ? m->C : m->F, gw = width / MIN_GROUP + 1;
    long start[MAX_JOBS + 1];
    start[0] = 0;
    for (int i = 0; i < n; i++) {
        const Mat *w = jobs[i].w;
        if (w->group) quantize_act(jobs[i].x, w->cols, w->group, m->xq + (long)i * width, m->xs + i * gw, m->xsx + i * gw);
        start[i + 1] = start[i] + (long)job_units(w) * unit_bytes(w);
    }
    const long total = start[n];
    int par = n_threads > 1 && total >= (1L << 18);
#pragma omp parallel if (par)
    {
#ifdef _OPENMP
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        const int t = 0, nt = 1;
#endif
        const long lo = total * t / nt, hi = total * (t + 1) / nt;
        for (int i = 0; i < n; i++) {
            if (start[i + 1] <= lo || start[i] >= hi) continue;
            const long c = unit_bytes(jobs[i].w);
            /* units whose first byte lies in [lo, hi) */
            long u0 = lo > start[i] ? (lo - start[i] + c - 1) / c : 0, u1 = (hi - start[i] + c - 1) / c;
            if (u1 > job_units(jobs[i].w)) u1 = job_units(jobs[i].w);
            run_units(&jobs[i], u0, u1, m->xq + (long)i * width, m->xs + i * gw, m->xsx + i * gw);
        }
    }
}

static void gemv(const Model *m, const Mat *w, const float *x, float *y) {
    Job j = {w, x, y};
    gemv_batch(m, &j, 1);
}

static void layer_norm(const float *x, int n, const float *w, const float *b, float eps, float *out) {
    double mu = 0.0, var = 0.0;
    for (int j = 0; j < n; j++) mu += x[j];
    mu /= n;
    for (int j = 0; j < n; j++) var += (x[j] - mu) * (x[j] - mu);
    float inv = (float)(1.0 / sqrt(var / n + eps));
    for (int j = 0; j < n; j++) out[j] = (float)(x[j] - mu) * inv * w[j] + b[j];
}

/* e^x, 8 lanes: x = n ln2 + r with |r| <= ln2 / 2, e^r by the degree-6 polynomial of the Cephes expf (within
 * 2 ulp of expf over the clamped range), times 2^n built in the exponent bits. */
static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654f)), _mm256_set1_ps(88.37626f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    /* n can reach 128 at the top of the range: split 2^n as 2^(n-1) * 2 so the exponent field never overflows */
    __m256 big = _mm256_cmp_ps(n, _mm256_set1_ps(127.f), _CMP_GT_OQ);
    e = _mm256_sub_epi32(e, _mm256_and_si256(_mm256_castps_si256(big), _mm256_set1_epi32(1 << 23)));
    p = _mm256_mul_ps(p, _mm256_blendv_ps(_mm256_set1_ps(1.f), _mm256_set1_ps(2.f), big));
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static inline float sigmoidf(float x) { return 1.f / (1.f + expf(-x)); }


/* out = sigmoid(a + b) (b may be NULL), eight at a time. */
static void sigmoid_sum(float *out, const float *a, const float *b, int n) {
    int j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 x = _mm256_loadu_ps(a + j);
        if (b) x = _mm256_add_ps(x, _mm256_loadu_ps(b + j));
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
        _mm256_storeu_ps(out + j, _mm256_div_ps(_mm256_set1_ps(1.f), _mm256_add_ps(_mm256_set1_ps(1.f), e)));
    }
    for (; j < n; j++) out[j] = sigmoidf(a[j] + (b ? b[j] : 0.f));
}

static void time_mix(const Model *m, int l, float *x) {
    const Layer *L = &((const Layer *)m->layers)[l];
    int C = m->C, H = m->H, N = m->N;
    float *sc = m->scratch;
    float *xa = sc, *xx = sc + C, *xr = sc + 2 * C, *xw = sc + 3 * C, *xk = sc + 4 * C, *xv = sc + 5 * C;
    float *xaa = sc + 6 * C, *xg = sc + 7 * C, *r = sc + 8 * C, *w = sc + 9 * C, *k = sc + 10 * C, *v = sc + 11 * C;
    float *a = sc + 12 * C, *g = sc + 13 * C, *kk = sc + 14 * C, *y = sc + 15 * C, *vfirst = sc + 16 * C;
    float *t = sc + 17 * C, *lo = sc + 19 * C + m->F; /* 5 D: the LoRAs' hidden values */
    float *last = m->att_x + (long)l * C;
    layer_norm(x, C, L->ln1_w, L->ln1_b, 1e-5f, xa);
    for (int j = 0; j < C; j++) {
        xx[j] = last[j] - xa[j];
        last[j] = xa[j];
        xr[j] = xa[j] + xx[j] * L->x_r[j];
        xw[j] = xa[j] + xx[j] * L->x_w[j];
        xk[j] = xa[j] + xx[j] * L->x_k[j];
        xv[j] = xa[j] + xx[j] * L->x_v[j];
        xaa[j] = xa[j] + xx[j] * L->x_a[j];
        xg[j] = xa[j] + xx[j] * L->x_g[j];
    }
    /* every product of the mixed inputs at once, then the LoRAs' second halves at once */
    float *lw = lo, *la = lo + m->D, *lv = lo + 2 * m->D, *lg = lo + 3 * m->D, *lg2 = lo + 4 * m->D;
    Job first[7] = {{&L->r, xr, r}, {&L->k, xk, k}, {&L->v, xv, v}, {&L->w1, xw, lw}, {&L->a1, xaa, la},
                    {&L->g1, xg, lg}, {&L->v1, xv, lv}};
    gemv_batch(m, first, l == 0 ? 6 : 7);
    for (int j = 0; j < L->w1.rows; j++) lw[j] = tanhf(lw[j]);
    sigmoid_sum(lg2, lg, NULL, L->g1.rows);
    Job second[4] = {{&L->w2, lw, w}, {&L->a2, la, a}, {&L->g2, lg2, g}, {&L->v2, lv, t}};
    gemv_batch(m, second, l == 0 ? 3 : 4);
    /* w = -softplus(-(w0 + lora)) - 0.5 and the decay is exp(-e^w); e^-softplus(-u) = sigmoid(u), so
     * e^w = e^-0.5 sigmoid(w0 + lora): two exponentials per channel in place of four calls */
    sigmoid_sum(w, L->w0, w, C);
    {
        int j = 0;
        const __m256 c = _mm256_set1_ps(-0.60653065971263342f);
        for (; j + 8 <= C; j += 8) _mm256_storeu_ps(w + j, exp8(_mm256_mul_ps(c, _mm256_loadu_ps(w + j))));
        for (; j < C; j++) w[j] = expf(-0.60653065971263342f * w[j]);
    }
    if (l == 0) {
        memcpy(vfirst, v, sizeof(float) * C);
    } else {
        sigmoid_sum(t, L->v0, t, C);
        for (int j = 0; j < C; j++) v[j] += (vfirst[j] - v[j]) * t[j];
    }
    sigmoid_sum(a, L->a0, a, C);
    for (int h = 0; h < H; h++) {
        float nrm = 0.f;
        for (int j = h * N; j < (h + 1) * N; j++) {
            kk[j] = k[j] * L->k_k[j];
            nrm += kk[j] * kk[j];
        }
        nrm = fmaxf(sqrtf(nrm), 1e-12f);
        for (int j = h * N; j < (h + 1) * N; j++) kk[j] /= nrm;
    }
    for (int j = 0; j < C; j++) k[j] *= 1.f + (a[j] - 1.f) * L->k_a[j];
    float *S_all = m->wkv + (long)l * H * N * N;
#pragma omp parallel for schedule(static) if (n_threads > 1)
    for (int h = 0; h < H; h++) {
        float *S = S_all + (long)h * N * N;
        const float *rh = r + h * N, *dh = w + h * N, *kh = k + h * N, *vh = v + h * N, *kkh = kk + h * N, *ah = a + h * N;
        float ka[256];
        for (int j = 0; j < N; j++) ka[j] = kkh[j] * ah[j];
        for (int i = 0; i < N; i++) { /* row i of S: value i, over keys j */
            float *Si = S + (long)i * N;
            float yi = 0.f;
            if (N % 8 == 0) {
                __m256 acc = _mm256_setzero_ps();
                for (int j = 0; j < N; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(Si + j), _mm256_loadu_ps(kkh + j), acc);
                const __m256 sa = _mm256_set1_ps(-hsum8(acc)), vi = _mm256_set1_ps(vh[i]);
                __m256 ya = _mm256_setzero_ps();
                for (int j = 0; j < N; j += 8) {
                    __m256 sij = _mm256_mul_ps(_mm256_loadu_ps(Si + j), _mm256_loadu_ps(dh + j));
                    sij = _mm256_fmadd_ps(sa, _mm256_loadu_ps(ka + j), sij);
                    sij = _mm256_fmadd_ps(vi, _mm256_loadu_ps(kh + j), sij);
                    _mm256_storeu_ps(Si + j, sij);
                    ya = _mm256_fmadd_ps(sij, _mm256_loadu_ps(rh + j), ya);
                }
                yi = hsum8(ya);
            } else {
                float sa = 0.f;
                for (int j = 0; j < N; j++) sa -= Si[j] * kkh[j];
                for (int j = 0; j < N; j++) {
                    Si[j] = Si[j] * dh[j] + sa * ka[j] + vh[i] * kh[j];
                    yi += Si[j] * rh[j];
                }
            }
            y[h * N + i] = yi;
        }
        layer_norm(y + h * N, N, L->lnx_w + h * N, L->lnx_b + h * N, 64e-5f, y + h * N); /* ln_x: one group per head */
        float bonus = 0.f;
        for (int j = 0; j < N; j++) bonus += rh[j] * kh[j] * L->r_k[h * N + j];
        for (int i = 0; i < N; i++) y[h * N + i] = (y[h * N + i] + bonus * vh[i]) * g[h * N + i];
    }
    gemv(m, &L->o, y, t);
    for (int j = 0; j < C; j++) x[j] += t[j];
}

static void channel_mix(const Model *m, int l, float *x) {
    const Layer *L = &((const Layer *)m->layers)[l];
    int C = m->C;
    float *xf = m->scratch, *xk = m->scratch + C, *t = m->scratch + 2 * C, *hid = m->scratch + 19 * C;
    float *last = m->ffn_x + (long)l * C;
    layer_norm(x, C, L->ln2_w, L->ln2_b, 1e-5f, xf);
    for (int j = 0; j < C; j++) {
        xk[j] = xf[j] + (last[j] - xf[j]) * L->ffn_x_k[j];
        last[j] = xf[j];
    }
    gemv(m, &L->fk, xk, hid);
    for (int j = 0; j < m->F; j++) {
        float u = hid[j] > 0.f ? hid[j] : 0.f;
        hid[j] = u * u;
    }
    gemv(m, &L->fv, hid, t);
    for (int j = 0; j < C; j++) x[j] += t[j];
}

static inline float siluf(float x) { return x / (1.f + expf(-x)); }

/* RWKV-6 time mix: xx = x_{t-1} - x_t; x_* = x + xx (maa_* + m_*) with m = maa2_* tanh(maa1 (x + xx maa_x));
 * decay = exp(-exp(time_decay + dec2 tanh(dec1 x_w))); per head, S [key, value]:
 * y = r S + (r . (u k)) v, S <- diag(decay) S + k^T v; out = output(GroupNorm(y) * silu(gate x_g)). */
static void time_mix6(const Model *m, int l, float *x) {
    const Layer6 *L = &((const Layer6 *)m->layers)[l];
    int C = m->C, H = m->H, N = m->N;
    float *sc = m->scratch;
    float *xa = sc, *xx = sc + C, *xxx = sc + 2 * C, *xw = sc + 3 * C, *xk = sc + 4 * C, *xv = sc + 5 * C;
    float *xr = sc + 6 * C, *xg = sc + 7 * C, *mix = sc + 8 * C; /* the 5 mixes, then r, w, k, v, g in place */
    float *r = sc + 8 * C, *w = sc + 9 * C, *k = sc + 10 * C, *v = sc + 11 * C, *g = sc + 12 * C, *y = sc + 13 * C;
    float *t = sc + 14 * C, *lo = sc + 19 * C + m->F, *ld = lo + L->maa1.rows;
    float *last = m->att_x + (long)l * C;
    layer_norm(x, C, L->ln1_w, L->ln1_b, 1e-5f, xa);
    for (int j = 0; j < C; j++) {
        xx[j] = last[j] - xa[j];
        last[j] = xa[j];
        xxx[j] = xa[j] + xx[j] * L->maa_x[j];
    }
    gemv(m, &L->maa1, xxx, lo);
    for (int j = 0; j < L->maa1.rows; j++) lo[j] = tanhf(lo[j]);
    const int d = L->maa2[0].cols;
    Job mixes[5];
    for (int i = 0; i < 5; i++) mixes[i] = (Job){&L->maa2[i], lo + i * d, mix + i * C};
    gemv_batch(m, mixes, 5);
    const float *maa[5] = {L->maa_w, L->maa_k, L->maa_v, L->maa_r, L->maa_g};
    float *xs[5] = {xw, xk, xv, xr, xg};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < C; j++) xs[i][j] = xa[j] + xx[j] * (maa[i][j] + mix[i * C + j]);
    Job first[6] = {{&L->r, xr, r}, {&L->k, xk, k}, {&L->v, xv, v}, {&L->g, xg, g}, {&L->dec1, xw, ld}};
    gemv_batch(m, first, 5);
    for (int j = 0; j < L->dec1.rows; j++) ld[j] = tanhf(ld[j]);
    gemv(m, &L->dec2, ld, w);
    for (int j = 0; j < C; j++) {
        w[j] = expf(-expf(L->time_decay[j] + w[j])); /* the decay */
        g[j] = siluf(g[j]);
    }
    float *S_all = m->wkv + (long)l * H * N * N;
#pragma omp parallel for schedule(static) if (n_threads > 1)
    for (int h = 0; h < H; h++) {
        float *S = S_all + (long)h * N * N;
        const float *rh = r + h * N, *dh = w + h * N, *kh = k + h * N, *vh = v + h * N, *uh = L->faaaa + h * N;
        float *yh = y + h * N;
        float bonus = 0.f;
        for (int i = 0; i < N; i++) bonus += rh[i] * uh[i] * kh[i];
        for (int j = 0; j < N; j++) yh[j] = bonus * vh[j];
        for (int i = 0; i < N; i++) { /* row i of S: key i, over values j */
            float *Si = S + (long)i * N;
            const float ri = rh[i], di = dh[i], ki = kh[i];
            for (int j = 0; j < N; j++) {
                yh[j] += ri * Si[j];
                Si[j] = di * Si[j] + ki * vh[j];
            }
        }
        layer_norm(yh, N, L->lnx_w + h * N, L->lnx_b + h * N, 64e-5f, yh); /* ln_x: one group per head */
        for (int j = 0; j < N; j++) yh[j] *= g[h * N + j];
    }
    gemv(m, &L->o, y, t);
    for (int j = 0; j < C; j++) x[j] += t[j];
}

/* RWKV-6 channel mix: sigmoid(receptance x_r) * value(relu(key x_k)^2). */
static void channel_mix6(const Model *m, int l, float *x) {
    const Layer6 *L = &((const Layer6 *)m->layers)[l];
    int C = m->C;
    float *xf = m->scratch, *xk = m->scratch + C, *xr = m->scratch + 2 * C, *t = m->scratch + 3 * C;
    float *rr = m->scratch + 4 * C, *hid = m->scratch + 19 * C;
    float *last = m->ffn_x + (long)l * C;
    layer_norm(x, C, L->ln2_w, L->ln2_b, 1e-5f, xf);
    for (int j = 0; j < C; j++) {
        xk[j] = xf[j] + (last[j] - xf[j]) * L->ffn_maa_k[j];
        xr[j] = xf[j] + (last[j] - xf[j]) * L->ffn_maa_r[j];
        last[j] = xf[j];
    }
    Job first[2] = {{&L->fk, xk, hid}, {&L->fr, xr, rr}};
    gemv_batch(m, first, 2);
    for (int j = 0; j < m->F; j++) {
        float u = hid[j] > 0.f ? hid[j] : 0.f;
        hid[j] = u * u;
    }
    gemv(m, &L->fv, hid, t);
    sigmoid_sum(rr, rr, NULL, C);
    for (int j = 0; j < C; j++) x[j] += rr[j] * t[j];
}

/* One token: updates the state in place and writes the V logits. */
int rwkv_step(const Model *m, int token, float *logits) {
    if (token < 0 || token >= m->V) return -1;
    int C = m->C;
    float *x = m->scratch + 18 * C, *xn = m->scratch;
    layer_norm(m->emb + (long)token * C, C, m->ln0_w, m->ln0_b, 1e-5f, x);
    for (int l = 0; l < m->n_layer; l++) {
        if (m->version == 6) {
            time_mix6(m, l, x);
            channel_mix6(m, l, x);
        } else {
            time_mix(m, l, x);
            channel_mix(m, l, x);
        }
    }
    layer_norm(x, C, m->lnout_w, m->lnout_b, 1e-5f, xn);
    gemv(m, &m->head, xn, logits);
    return 0;
}

/* y = W x for one matrix (the kernels' own test and in-cache rate). */
int rwkv_gemv(const Model *m, const Mat *w, const float *x, float *y) {
    gemv(m, w, x, y);
    return 0;
}

/* The read bandwidth probe of the decode benchmark: n floats summed on n_threads threads, each a contiguous
 * share, with the fp32 dot product's prefetch distance (prefetch_f32, which the benchmark sets to the one tuned on
 * this machine); the sum keeps the reads from being optimised away. */
double rwkv_read_probe(const float *a, long n) {
    double total = 0.0;
#pragma omp parallel reduction(+ : total) if (n_threads > 1)
    {
#ifdef _OPENMP
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        const int t = 0, nt = 1;
#endif
        long lo = (n / 32) * t / nt * 32, hi = (n / 32) * (t + 1) / nt * 32;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        const int pf = prefetch_f32;
        for (long j = lo; j < hi; j += 32) {
            if (pf) {
                _mm_prefetch((const char *)(a + j) + pf, _MM_HINT_T0);
                _mm_prefetch((const char *)(a + j) + pf + 64, _MM_HINT_T0);
            }
            a0 = _mm256_add_ps(a0, _mm256_loadu_ps(a + j));
            a1 = _mm256_add_ps(a1, _mm256_loadu_ps(a + j + 8));
            a2 = _mm256_add_ps(a2, _mm256_loadu_ps(a + j + 16));
            a3 = _mm256_add_ps(a3, _mm256_loadu_ps(a + j + 24));
        }
        total += hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    }
    for (long j = n / 32 * 32; j < n; j++) total += a[j];
    return total;
}
